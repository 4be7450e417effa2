package tsv

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a\tb\nc\rd\\e", "\\t literal", "\xff\x00\t", "end\\"} {
		e := AppendEscaped(nil, []byte(s))
		if bytes.ContainsAny(e, "\t\n\r") {
			t.Errorf("escaped %q = %q still holds a separator", s, e)
		}
		for _, strict := range []bool{true, false} {
			got, err := AppendUnescaped(nil, e, strict)
			if err != nil || string(got) != s {
				t.Errorf("unescape(strict=%v) of %q = %q, %v; want %q", strict, e, got, err, s)
			}
		}
	}
}

func TestUnescape_OtherEscapes(t *testing.T) {
	for _, in := range []string{`a\x`, `a\`, `\q\t`} {
		if _, err := AppendUnescaped(nil, []byte(in), true); err == nil {
			t.Errorf("strict unescape of %q: no error", in)
		}
	}
	got, err := AppendUnescaped(nil, []byte(`a\x\tb\`), false)
	if err != nil || string(got) != "a\\x\tb\\" {
		t.Errorf("lenient unescape = %q, %v; want the unknown escapes kept", got, err)
	}
}

func FuzzUnescape(f *testing.F) {
	f.Add([]byte(`a\tb\\c\q`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := AppendUnescaped(nil, AppendEscaped(nil, b), true); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("round trip of %q = %q, %v", b, got, err)
		}
		_, _ = AppendUnescaped(nil, b, true)
		_, _ = AppendUnescaped(nil, b, false)
	})
}
