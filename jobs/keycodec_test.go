package jobs

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// keyTextSeeds are strings whose JSON texts must stay apart: invalid UTF-8, U+FFFD itself,
// encoded surrogates, escapes.
var keyTextSeeds = []string{"", "plain", "bad\xffutf8", "bad\ufffdutf8", "\xed\xa0\x80", "\xed\xb2\x80", "\x80", "\xc3", "é\xe9",
	"tab\there\nnew\\", "\x00\x1f\"", "\u2028", "\U0001F600", "\xf0\x9f\x98"}

// Every string, valid UTF-8 or not, gives valid JSON that reads back byte for byte, through
// AppendUnquoted and through a TSV field.
func FuzzKeyText(f *testing.F) {
	for _, s := range keyTextSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		j := AppendJSONString(nil, string(key))
		if !json.Valid(j) {
			t.Fatalf("AppendJSONString(%q) = %s: not JSON", key, j)
		}
		back, err := AppendUnquoted(nil, j)
		if err != nil || !bytes.Equal(back, key) {
			t.Fatalf("AppendUnquoted(%s) = %q, %v; want %q", j, back, err, key)
		}
		if utf8.Valid(key) {
			var s string
			if err := json.Unmarshal(j, &s); err != nil || s != string(key) {
				t.Fatalf("encoding/json reads %s as %q, %v; want %q", j, s, err, key)
			}
		}
		field, err := AppendTSVField(nil, j)
		if err != nil || bytes.ContainsAny(field, "\t\n\r") {
			t.Fatalf("AppendTSVField(%s) = %q, %v", j, field, err)
		}
		back, err = ParseTSVField(nil, field)
		if err != nil || !bytes.Equal(back, key) {
			t.Fatalf("ParseTSVField(%q) = %q, %v; want %q", field, back, err, key)
		}
	})
}

// Two distinct strings never share a JSON text.
func TestAppendJSONString_DistinctStaysDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, s := range keyTextSeeds {
		j := string(AppendJSONString(nil, s))
		if o, ok := seen[j]; ok {
			t.Fatalf("%q and %q both written as %s", o, s, j)
		}
		seen[j] = s
	}
	if got := string(AppendJSONString(nil, "a\xffb")); got != `"a\udcffb"` {
		t.Fatalf(`AppendJSONString("a\xffb") = %s, want "a\udcffb"`, got)
	}
}

// AppendUnquoted reads what encoding/json writes, pairs and lone surrogates as encoding/json
// does, and refuses what is not one JSON string.
func TestAppendUnquoted(t *testing.T) {
	for _, s := range []string{"é€😀", "a\"b\\c/d\b\f\n\r\t\x01", "<&>"} {
		j, _ := json.Marshal(s)
		if got, err := AppendUnquoted(nil, j); err != nil || string(got) != s {
			t.Errorf("AppendUnquoted(%s) = %q, %v", j, got, err)
		}
	}
	for j, want := range map[string]string{`"\ud83d\ude00"`: "😀", `"\ud83d"`: "\ufffd", `"\udc00"`: "\ufffd", `"\u00e9\/"`: "é/", `"\udc80x"`: "\x80x"} {
		if got, err := AppendUnquoted(nil, []byte(j)); err != nil || string(got) != want {
			t.Errorf("AppendUnquoted(%s) = %q, %v; want %q", j, got, err, want)
		}
	}
	for _, j := range []string{``, `"`, `x"`, `"a"b"`, `"\"`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"\n\"", `1`} {
		if got, err := AppendUnquoted(nil, []byte(j)); err == nil {
			t.Errorf("AppendUnquoted(%s) = %q, want an error", j, got)
		}
	}
	for _, f := range []string{`a\`, `a\x`, `\u0041`} {
		if got, err := ParseTSVField(nil, []byte(f)); err == nil {
			t.Errorf("ParseTSVField(%s) = %q, want an error", f, got)
		}
	}
}
