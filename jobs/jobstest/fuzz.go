package jobstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// FuzzAggregate fuzzes the decoders of job's aggregate: Merge of a partial and UnmarshalBinary of
// a checkpoint, both of which read bytes from outside the process. seeds (good partials, from
// MapAll say) start the corpus, and the first of them is merged into the aggregate before each
// input, so that a refused input is seen to change nothing. For every input:
//
//   - neither Merge nor UnmarshalBinary panics;
//   - a failed Merge matches jobs.ErrBadPartial and leaves the aggregate as it was;
//   - a failed UnmarshalBinary matches jobs.ErrBadCheckpoint;
//   - what UnmarshalBinary accepts marshals to data that a fresh aggregate restores to the same
//     encoding (a checkpoint is a fixed point);
//   - Result does not panic (it may fail: an empty pi has no estimate).
//
// Call it from a FuzzXxx function; `go test` runs the seeds, `go test -fuzz` explores.
func FuzzAggregate(f *testing.F, job jobs.Job, params string, seeds ...[]byte) {
	f.Helper()
	raw := json.RawMessage(params)
	if _, err := job.NewAggregate(raw); err != nil {
		f.Fatalf("%s: NewAggregate(%s): %v", job.Type(), params, err)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		agg, _ := job.NewAggregate(raw)
		if len(seeds) > 0 {
			if err := agg.Merge(seeds[0]); err != nil {
				t.Fatalf("%s: Merge of the first seed: %v", job.Type(), err)
			}
		}
		before, err := agg.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: MarshalBinary: %v", job.Type(), err)
		}
		if err := agg.Merge(data); err != nil {
			if !errors.Is(err, jobs.ErrBadPartial) {
				t.Fatalf("%s: Merge error does not match jobs.ErrBadPartial: %v", job.Type(), err)
			}
			after, _ := agg.MarshalBinary()
			if !bytes.Equal(before, after) {
				t.Fatalf("%s: a failed Merge changed the aggregate: %v", job.Type(), err)
			}
		}
		_, _ = agg.Result()

		fresh, _ := job.NewAggregate(raw)
		if err := fresh.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, jobs.ErrBadCheckpoint) {
				t.Fatalf("%s: UnmarshalBinary error does not match jobs.ErrBadCheckpoint: %v", job.Type(), err)
			}
			return
		}
		Checkpoint(t, job, raw, fresh)
		_, _ = fresh.Result()
	})
}

// FuzzParams fuzzes job's parameter decoder, which reads what a submitter sends. seeds start the
// corpus. For every input, Validate does not panic; it refuses with a *jobs.ParamError of job's
// type (matching jobs.ErrBadParams), or accepts, and then NewAggregate accepts too.
func FuzzParams(f *testing.F, job jobs.Job, seeds ...string) {
	f.Helper()
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		CheckParams(t, job, params)
	})
}

// CheckParams is the body of FuzzParams, for a fuzz target that checks more (Split, say) after
// it. It reports whether Validate accepted params.
func CheckParams(t testing.TB, job jobs.Job, params []byte) bool {
	t.Helper()
	raw := json.RawMessage(params)
	if err := job.Validate(raw); err != nil {
		var pe *jobs.ParamError
		if !errors.As(err, &pe) || pe.Job != job.Type() || !errors.Is(err, jobs.ErrBadParams) {
			t.Fatalf("%s: Validate error is not a *jobs.ParamError of %s: %T %v", job.Type(), job.Type(), err, err)
		}
		return false
	}
	if _, err := job.NewAggregate(raw); err != nil {
		t.Fatalf("%s: NewAggregate refused what Validate accepted: %v", job.Type(), err)
	}
	return true
}
