package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestChainStep_ParamsAfter(t *testing.T) {
	for in, want := range map[string]string{
		`{"job":"$prev","by":"value"}`:           `{"by":"value","job":"j-1"}`,
		`{"a":["$prev",{"b":"$prev"}],"n":1.50}`: `{"a":["j-1",{"b":"j-1"}],"n":1.50}`,
		`{"job":"x\"$prev","$prev":"$prevx"}`:    `{"$prev":"$prevx","job":"x\"$prev"}`,
		`{"shards":3}`:                           `{"shards":3}`,
	} {
		got, err := ChainStep{Type: "t", Params: json.RawMessage(in)}.ParamsAfter("j-1")
		if err != nil || string(got) != want {
			t.Errorf("ParamsAfter(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if ChainJobID("20261126-000000-abc", 2) != "20261126-000000-abc-2" {
		t.Error("ChainJobID")
	}
}

func TestParseChain(t *testing.T) {
	steps, err := ParseChain([]byte(`[{"type":"wordcount","params":{"container":"c","output":"blob"}},{"type":"regroup","params":{"job":"$prev"}},{"type":"sleep"}]`))
	if err != nil || len(steps) != 3 || steps[1].Type != "regroup" || string(steps[2].Params) != "{}" {
		t.Fatalf("ParseChain = %+v, %v", steps, err)
	}
	for in, want := range map[string]string{
		`{}`:                        "want [{",
		`[]`:                        "0 steps, want 1 to 8",
		`[{"type":"a","param":{}}]`: `unknown field "param"`,
		`[{"params":{}}]`:           "step 1: no job type",
		`[{"type":"a","params":{"job":"$prev"}}]`: "the first step has none",
		`[{"type":"a"},{"type":""}]`:              "chain step 2: no job type",
		`[{"type":"a"}] [1]`:                      "trailing data",
		`[{"type":"a"},{"type":"b"},{"type":"b"},{"type":"b"},{"type":"b"},{"type":"b"},{"type":"b"},{"type":"b"},{"type":"b"}]`: "9 steps",
	} {
		_, err := ParseChain([]byte(in))
		if !errors.Is(err, ErrBadSchedule) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseChain(%s) = %v, want an ErrBadSchedule with %q", in, err, want)
		}
	}
	// A schedule keeps its chain through Encode and ParseSchedule.
	s := Schedule{Name: "n", UID: "u", Every: "1m", Type: "a", Params: json.RawMessage(`{}`), Overlap: OverlapSkip, CatchUp: "5m", Then: steps[1:]}
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSchedule(data)
	if err != nil || len(back.Then) != 2 || string(back.Then[0].Params) != `{"job":"$prev"}` {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// FuzzParseChain: a chain file is outside input. Never a panic; an accepted chain's steps all
// substitute "$prev" into valid JSON and fit a schedule.
func FuzzParseChain(f *testing.F) {
	f.Add([]byte(`[{"type":"wordcount","params":{"container":"c"}},{"type":"regroup","params":{"job":"$prev","x":["$prev"]}}]`))
	f.Add([]byte(`[{"type":"a","params":null}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		steps, err := ParseChain(data)
		if err != nil {
			if !errors.Is(err, ErrBadSchedule) {
				t.Fatalf("error %v is not ErrBadSchedule", err)
			}
			return
		}
		for _, s := range steps[1:] {
			p, err := s.ParamsAfter("j-1")
			if err != nil || !json.Valid(p) {
				t.Fatalf("ParamsAfter(%s) = %s, %v", s.Params, p, err)
			}
		}
		sc := Schedule{Name: "n", UID: "u", Every: "1m", Type: steps[0].Type, Params: steps[0].Params, Overlap: OverlapSkip, CatchUp: "5m", Then: steps[1:]}
		if err := sc.Check(); err != nil {
			t.Fatalf("Check of a parsed chain: %v", err)
		}
	})
}
