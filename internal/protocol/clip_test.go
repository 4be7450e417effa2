package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
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

// Clip never grows a long string beyond n plus its size note, never cuts a rune, and keeps a
// prefix of s.
func FuzzClip(f *testing.F) {
	f.Add("abcdef", 3)
	f.Add("héllo wörld", 2)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 1 << 16
		got := Clip(s, n)
		if len(s) <= max(n, 0) {
			if got != s {
				t.Fatalf("Clip(%q, %d) = %q, want it whole", s, n, got)
			}
			return
		}
		cut := strings.Index(got, "…(")
		if cut < 0 || cut > max(n, 0) || !strings.HasPrefix(s, got[:cut]) {
			t.Fatalf("Clip(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Clip(%q, %d) = %q cuts a rune", s, n, got)
		}
	})
}
