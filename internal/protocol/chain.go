package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
)

// Chains. A schedule may make a chain per tick: its own job (step 1), then each step of Then,
// after the previous step and reading its output through the placeholder PrevJob. Step k's id is
// the tick's job id with "-k" added, the same for every leader, so a tick fired again makes no
// step twice (each spec If-None-Match).

// PrevJob, as a JSON string anywhere in a step's parameters, is replaced by the id of the
// previous step's job: {"job": "$prev"} reads its output.
const PrevJob = "$prev"

// MaxChainSteps bounds a chain's steps, the schedule's own job included.
const MaxChainSteps = 8

// ChainStep is a job a chain makes after the previous one.
type ChainStep struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params"`
}

// ChainJobID is the id of step (2 to MaxChainSteps) of the chain whose first job is first.
func ChainJobID(first string, step int) string { return first + "-" + strconv.Itoa(step) }

// ParamsAfter returns the step's parameters with every JSON string PrevJob replaced by prev.
func (s ChainStep) ParamsAfter(prev string) (json.RawMessage, error) {
	if !bytes.Contains(s.Params, []byte(PrevJob)) {
		return s.Params, nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Params))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: chain step %s: params: %v", ErrBadSchedule, s.Type, err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			if x == PrevJob {
				return prev
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(walk(v)); err != nil {
		return nil, fmt.Errorf("%w: chain step %s: params: %v", ErrBadSchedule, s.Type, err)
	}
	return bytes.TrimSpace(buf.Bytes()), nil
}

// checkThen checks a schedule's later chain steps.
func checkThen(then []ChainStep) error {
	if len(then) > MaxChainSteps-1 {
		return fmt.Errorf("%w: a chain of %d steps, the limit is %d", ErrBadSchedule, len(then)+1, MaxChainSteps)
	}
	for i, s := range then {
		if s.Type == "" {
			return fmt.Errorf("%w: chain step %d: no job type", ErrBadSchedule, i+2)
		}
		if len(s.Params) == 0 || !json.Valid(s.Params) {
			return fmt.Errorf("%w: chain step %d (%s): params must be a JSON value", ErrBadSchedule, i+2, Clip(s.Type, 64))
		}
	}
	return nil
}

// ParseChain decodes a chain file: a JSON array of 1 to MaxChainSteps steps, each
// {"type": T, "params": {...}}, strictly. "$prev" in a step's params names the previous step's
// job; the first step has none.
func ParseChain(data []byte) ([]ChainStep, error) {
	if len(data) > jobs.MaxSpecBytes {
		return nil, fmt.Errorf("%w: chain: %d bytes, the limit is %d", ErrBadSchedule, len(data), jobs.MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var steps []ChainStep
	if err := dec.Decode(&steps); err != nil {
		return nil, fmt.Errorf(`%w: chain: %v; want [{"type": T, "params": {...}}, {"type": T2, "params": {"job": "$prev", ...}}]`, ErrBadSchedule, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: chain: trailing data after the JSON array", ErrBadSchedule)
	}
	if len(steps) == 0 || len(steps) > MaxChainSteps {
		return nil, fmt.Errorf("%w: chain: %d steps, want 1 to %d", ErrBadSchedule, len(steps), MaxChainSteps)
	}
	for i := range steps {
		if len(steps[i].Params) == 0 || bytes.Equal(bytes.TrimSpace(steps[i].Params), []byte("null")) {
			steps[i].Params = json.RawMessage("{}")
		}
	}
	if steps[0].Type == "" {
		return nil, fmt.Errorf("%w: chain step 1: no job type", ErrBadSchedule)
	}
	if bytes.Contains(steps[0].Params, []byte(`"`+PrevJob+`"`)) {
		return nil, fmt.Errorf("%w: chain step 1: %q names the previous step's job, and the first step has none", ErrBadSchedule, PrevJob)
	}
	if err := checkThen(steps[1:]); err != nil {
		return nil, err
	}
	return steps, nil
}
