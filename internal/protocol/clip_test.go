package protocol

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcdef", 4, "abcd…(6 bytes)"},
		{"", 0, ""},
		{"héllo", 2, "h…(6 bytes)"}, // never cuts inside a rune
		{"abc", -1, "…(3 bytes)"},
	} {
		if got := Clip(c.in, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
	big := strings.Repeat("x", 61440)
	if got := Clip(big, ClipLen); len(got) > ClipLen+32 || !strings.HasSuffix(got, "(61440 bytes)") {
		t.Errorf("Clip of 60 KB: %d bytes, %q…", len(got), got[len(got)-20:])
	}
}

// A huge job id is not echoed whole by the error that refuses it.
func TestCheckID_ClipsHugeID(t *testing.T) {
	err := CheckID(strings.Repeat("a", 10240))
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "(10240 bytes)") {
		t.Fatalf("CheckID of a 10 KB id: %v", err)
	}
}
