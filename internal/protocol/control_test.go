package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestNames_ValidateSubject(t *testing.T) {
	n := NewNames("mapagg")
	for typ, want := range map[string]string{
		"primes":   "mapagg.ctl.validate.primes",
		"my-job_2": "mapagg.ctl.validate.my-job_5f2",
		"a.b":      "mapagg.ctl.validate.a_2eb",
		".a":       "mapagg.ctl.validate._2ea",
	} {
		if got := n.ValidateSubject(typ); got != want {
			t.Errorf("ValidateSubject(%q) = %q, want %q", typ, got, want)
		}
	}
	if n.ValidateSubject("a.b") == n.ValidateSubject("a_b") {
		t.Error("a.b and a_b share a subject")
	}
	if got := n.TypesSubject(); got != "mapagg.ctl.types" {
		t.Errorf("TypesSubject = %q", got)
	}
}

func TestValidateRequest_RoundTrip(t *testing.T) {
	in := ValidateRequest{Type: "squares", Params: []byte(`{"n":3}`)}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeValidateRequest(b)
	if err != nil || !reflect.DeepEqual(*out, in) {
		t.Fatalf("round trip: %v %+v", err, out)
	}
	for _, bad := range []string{``, `[]`, `{"type":"","params":{}}`, `{"type":"a b","params":{}}`,
		`{"type":"x"}`, `{"type":"x","params":` + `"` + strings.Repeat("a", MaxControlParams) + `"}`} {
		if _, err := DecodeValidateRequest([]byte(bad)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeValidateRequest(%.40q) = %v, want ErrBadMessage", bad, err)
		}
	}
}

func TestValidateReply_RoundTrip(t *testing.T) {
	for _, in := range []ValidateReply{
		{Worker: "w1", OK: true},
		{Worker: "w1", Error: &ValidateError{Kind: RefusedParams, Job: "primes", Field: "to", Reason: `"to" must be above "from"`, Param: true}},
		{Worker: "w1", Error: &ValidateError{Kind: RefusedType, Reason: "no such type"}},
	} {
		b, err := in.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeValidateReply(b)
		if err != nil || !reflect.DeepEqual(*out, in) {
			t.Fatalf("round trip %s: %v %+v", b, err, out)
		}
	}
	for _, bad := range []string{`{}`, `{"worker":"w"}`, `{"worker":"w","ok":true,"error":{"kind":"type","reason":"x"}}`,
		`{"worker":"","ok":true}`, `{"worker":"w\n","ok":true}`, `{"worker":"w","error":{"kind":"other","reason":"x"}}`,
		`{"worker":"w","error":{"kind":"params","reason":""}}`, `{"worker":"w","error":{"kind":"params","reason":"x","job":"a/b"}}`,
		`{"worker":"w","error":{"kind":"params","reason":"` + strings.Repeat("r", MaxControlText+1) + `"}}`} {
		if _, err := DecodeValidateReply([]byte(bad)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeValidateReply(%.60q) = %v, want ErrBadMessage", bad, err)
		}
	}
}

func TestTypesReply_RoundTrip(t *testing.T) {
	in := TypesReply{Worker: "host-1", Types: []string{"pi", "primes", "x.y"}}
	b, _ := in.Encode()
	out, err := DecodeTypesReply(b)
	if err != nil || !reflect.DeepEqual(*out, in) {
		t.Fatalf("round trip: %v %+v", err, out)
	}
	if _, err := DecodeTypesReply([]byte(`{"worker":"w","types":[]}`)); err != nil {
		t.Fatalf("a worker without types is valid: %v", err)
	}
	many := `{"worker":"w","types":["a"` + strings.Repeat(`,"a"`, MaxTypesPerWorker) + `]}`
	for _, bad := range []string{`{"types":["a"]}`, `{"worker":"w","types":[""]}`, `{"worker":"w","types":["a>b"]}`, many, `{"worker":"w","types":"a"}`} {
		if _, err := DecodeTypesReply([]byte(bad)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("DecodeTypesReply(%.60q) = %v, want ErrBadMessage", bad, err)
		}
	}
}

func FuzzDecodeValidateRequest(f *testing.F) {
	f.Add([]byte(`{"type":"primes","params":{"to":10}}`))
	f.Add([]byte(`{"type":"x.y","params":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeValidateRequest(data)
		if err != nil {
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeValidateRequest(b); err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
	})
}

func FuzzDecodeValidateReply(f *testing.F) {
	f.Add([]byte(`{"worker":"w1","ok":true}`))
	f.Add([]byte(`{"worker":"w1","error":{"kind":"params","job":"primes","field":"to","reason":"bad","param":true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeValidateReply(data)
		if err != nil {
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeValidateReply(b); err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
	})
}

func FuzzDecodeTypesReply(f *testing.F) {
	f.Add([]byte(`{"worker":"w1","types":["pi","primes"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeTypesReply(data)
		if err != nil {
			return
		}
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeTypesReply(b); err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
	})
}
