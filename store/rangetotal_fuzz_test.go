package store

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzRangeTotal: a Content-Range header (from the storage service) is read without a panic; a
// size it accepts is the number after the slash of a "bytes" range, and is not negative.
func FuzzRangeTotal(f *testing.F) {
	for _, s := range []string{"bytes 0-1023/5000", "bytes 0-0/1", "bytes */0", "bytes 0-9/-1", "items 0-1/2", "bytes 0-1/", "", "bytes 0-1/99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, ok := rangeTotal(v)
		if !ok {
			return
		}
		_, total, _ := strings.Cut(v, "/")
		m, err := strconv.ParseInt(total, 10, 64)
		if n < 0 || !strings.HasPrefix(v, "bytes ") || err != nil || m != n {
			t.Fatalf("rangeTotal(%q) = %d", v, n)
		}
	})
}

func TestRangeTotal(t *testing.T) {
	for v, want := range map[string]int64{"bytes 0-1023/5000": 5000, "bytes 0-0/1": 1} {
		if n, ok := rangeTotal(v); !ok || n != want {
			t.Errorf("rangeTotal(%q) = %d, %v; want %d", v, n, ok, want)
		}
	}
	for _, v := range []string{"bytes 0-1/", "items 0-1/2", "bytes 0-9/-1", "", "bytes 0-1/x"} {
		if n, ok := rangeTotal(v); ok {
			t.Errorf("rangeTotal(%q) = %d, want refused", v, n)
		}
	}
}
