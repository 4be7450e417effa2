package rig

import (
	"fmt"
	"strings"
)

// JoinList writes xs as a comma-separated list.
func JoinList[T any](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// ParseList reads a comma-separated list of elements that parse and ok accept, what names them.
func ParseList[T any](s, what string, parse func(string) (T, error), ok func(T) bool) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			x, err := parse(f)
			if err != nil || !ok(x) {
				return nil, fmt.Errorf("%q is not %s", f, what)
			}
			out = append(out, x)
		}
	}
	return out, nil
}
