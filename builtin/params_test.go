package builtin

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func TestValidate_BadParams(t *testing.T) {
	tests := []struct {
		job    jobs.Job
		params string
		field  string // want ParamError.Field
		msg    string // want in the message
	}{
		// Shape, shared by every job through decodeParams.
		{primesJob, `[1, 2]`, "", "must be a JSON object"},
		{primesJob, `"to"`, "", "must be a JSON object"},
		{primesJob, `{"to": 10,`, "", "not valid JSON"},
		{primesJob, `{"to": 10} {}`, "", "not valid JSON"},
		{primesJob, `{"to": 10, "shards": 1, "form": 0}`, "form", `unknown field "form"; allowed fields: from, shards, to`},
		{primesJob, `{"To": 10, "shards": 1}`, "To", `unknown field "To"`},
		{primesJob, `{"to": "10", "shards": 1}`, "to", `"to" must be a non-negative integer (got string)`},
		{primesJob, `{"to": 10, "shards": 1.5}`, "shards", `"shards" must be an integer (got number 1.5)`},
		{primesJob, `{"to": 10, "shards": true}`, "shards", `"shards" must be an integer (got bool)`},

		// primes
		{primesJob, ``, "to", `"to" is required; usage: {"from": 0, "to": 10000000, "shards": 100}`},
		{primesJob, `null`, "to", `"to" is required`},
		{primesJob, `{"shards": 2}`, "to", `"to" is required`},
		{primesJob, `{"to": null, "shards": 2}`, "to", `"to" is required`},
		{primesJob, `{"to": 100}`, "shards", `"shards" is required`},
		{primesJob, `{"from": -1, "to": 100, "shards": 2}`, "from", `"from" must be a non-negative integer (got number -1)`},
		{primesJob, `{"from": 10, "to": 5, "shards": 1}`, "to", `"to" must be greater than "from" (got from=10, to=5)`},
		{primesJob, `{"from": 10, "to": 10, "shards": 1}`, "to", `must be greater than "from"`},
		{primesJob, `{"to": 1125899906842625, "shards": 1000000}`, "to", `"to" must be at most 1125899906842624 (2^50)`},
		{primesJob, `{"to": 18446744073709551616, "shards": 1}`, "to", `"to" must be a non-negative integer`},
		{primesJob, `{"to": 100, "shards": 0}`, "shards", `"shards" must be at least 1 (got 0)`},
		{primesJob, `{"to": 100, "shards": -3}`, "shards", `"shards" must be at least 1 (got -3)`},
		{primesJob, `{"to": 10000000, "shards": 1000001}`, "shards", `"shards" must be at most 1000000 (got 1000001)`},
		{primesJob, `{"from": 5, "to": 10, "shards": 6}`, "shards", `"shards" must be at most the size of the range, to-from=5 (got 6)`},
		{primesJob, `{"to": 10000000000, "shards": 1}`, "shards", `"shards" is too small: each shard would cover 10000000000 numbers, the limit is 4294967296; use "shards" ≥ 3`},

		// pi
		{piJob, `{}`, "samples", `"samples" is required`},
		{piJob, `{"samples": 100}`, "shards", `"shards" is required`},
		{piJob, `{"samples": 0, "shards": 1}`, "samples", `"samples" must be at least 1 (got 0)`},
		{piJob, `{"samples": -5, "shards": 1}`, "samples", `"samples" must be at least 1 (got -5)`},
		{piJob, `{"samples": 1000000000000001, "shards": 1000000}`, "samples", `"samples" must be at most 1000000000000000`},
		{piJob, `{"samples": 100, "shards": 0}`, "shards", `"shards" must be at least 1`},
		{piJob, `{"samples": 100, "shards": 101}`, "shards", `"shards" must be at most "samples" (got samples=100, shards=101)`},
		{piJob, `{"samples": 10000000000, "shards": 2}`, "shards", `each shard would draw 5000000000 samples, the limit is 1000000000; use "shards" ≥ 10`},
		{piJob, `{"samples": 100, "shards": 1, "seed": -1}`, "seed", `"seed" must be a non-negative integer (got number -1)`},
		{piJob, `{"samples": 100, "shards": 1, "sed": 1}`, "sed", `unknown field "sed"; allowed fields: samples, seed, shards`},

		// wordcount
		{wordcount{}, `{}`, "container", `"container" is required; usage:`},
		{wordcount{}, `{"container": ""}`, "container", `"container" must be 3 to 63 characters`},
		{wordcount{}, `{"container": "ab"}`, "container", `(got "ab")`},
		{wordcount{}, `{"container": "Corpus"}`, "container", `of a-z, 0-9 and '-'`},
		{wordcount{}, `{"container": "-corpus"}`, "container", `start with a letter or digit`},
		{wordcount{}, `{"container": "corpus-"}`, "container", `"container" must be`},
		{wordcount{}, `{"container": "cor--pus"}`, "container", `"container" must be`},
		{wordcount{}, `{"container": "cor_pus"}`, "container", `"container" must be`},
		{wordcount{}, `{"container": "` + strings.Repeat("a", 64) + `"}`, "container", `"container" must be`},
		{wordcount{}, `{"container": 12345}`, "container", `"container" must be a string (got number)`},
		{wordcount{}, `{"container": "corpus", "prefix": "` + strings.Repeat("p", 1025) + `"}`, "prefix", `"prefix" must be at most 1024 bytes (got 1025)`},
		{wordcount{}, `{"container": "corpus", "top": -1}`, "top", `"top" must be between 0 and 10000 (got -1)`},
		{wordcount{}, `{"container": "corpus", "top": 10001}`, "top", `"top" must be between 0 and 10000`},
		{wordcount{}, `{"container": "corpus", "shard_bytes": 0}`, "shard_bytes", `"shard_bytes" must be between 1 and 1073741824 (1 GiB) (got 0)`},
		{wordcount{}, `{"container": "corpus", "shard_bytes": 1073741825}`, "shard_bytes", `"shard_bytes" must be between 1 and`},
		{wordcount{}, `{"container": "corpus", "shard_bytes": "8MiB"}`, "shard_bytes", `"shard_bytes" must be an integer (got string)`},

		// sleep
		{sleep{}, `{}`, "shards", `"shards" is required`},
		{sleep{}, `{"shards": 0}`, "shards", `"shards" must be at least 1`},
		{sleep{}, `{"shards": 1000001}`, "shards", `"shards" must be at most 1000000`},
		{sleep{}, `{"shards": 10, "duration": "fast"}`, "duration", `"duration" must be a Go duration such as "50ms" or "2s" (got "fast")`},
		{sleep{}, `{"shards": 10, "duration": 50}`, "duration", `"duration" must be a string (got number)`},
		{sleep{}, `{"shards": 10, "duration": "-1s"}`, "duration", `"duration" must be between 0s and 1h0m0s (got "-1s")`},
		{sleep{}, `{"shards": 10, "duration": "61m"}`, "duration", `"duration" must be between 0s and 1h0m0s`},
		{sleep{}, `{"shards": 10, "fail_rate": 1.01}`, "fail_rate", `"fail_rate" must be between 0 and 1 (got 1.01)`},
		{sleep{}, `{"shards": 10, "fail_rate": -0.5}`, "fail_rate", `"fail_rate" must be between 0 and 1`},
		{sleep{}, `{"shards": 10, "fail_always": [10]}`, "fail_always", `"fail_always" lists shard 10; shard indices run from 0 to shards-1 = 9`},
		{sleep{}, `{"shards": 10, "fail_always": [-1]}`, "fail_always", `lists shard -1`},
		{sleep{}, `{"shards": 10, "fail_always": 3}`, "fail_always", `"fail_always" must be a list of integers (got number)`},
		{sleep{}, `{"shards": 10, "fail_always": ["3"]}`, "fail_always", `"fail_always" must be a list of integers (got string in the list)`},
		{sleep{}, `{"shards": 10, "panic_always": [12]}`, "panic_always", `"panic_always" lists shard 12`},
		{sleep{}, `{"shards": 10, "fail_always": [1, 2], "panic_always": [2]}`, "panic_always", `shard 2 is in both "fail_always" and "panic_always"`},
		{sleep{}, `{"shards": 5000, "fail_always": [` + strings.TrimSuffix(strings.Repeat("1,", 1001), ",") + `]}`, "fail_always", `"fail_always" may list at most 1000 shards (got 1001)`},
		{sleep{}, `{"shards": 10, "panic": true}`, "panic", `unknown field "panic"; allowed fields: duration, fail_always, fail_rate, panic_always, seed, shards`},
	}
	for _, tt := range tests {
		t.Run(tt.job.Type()+"/"+tt.params[:min(len(tt.params), 40)], func(t *testing.T) {
			err := tt.job.Validate(json.RawMessage(tt.params))
			if err == nil {
				t.Fatalf("Validate(%s) = nil", tt.params)
			}
			if !errors.Is(err, jobs.ErrBadParams) {
				t.Errorf("error %v does not match jobs.ErrBadParams", err)
			}
			var pe *jobs.ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *jobs.ParamError", err)
			}
			if pe.Job != tt.job.Type() || pe.Field != tt.field {
				t.Errorf("jobs.ParamError{Job: %q, Field: %q}, want {%q, %q}", pe.Job, pe.Field, tt.job.Type(), tt.field)
			}
			if !strings.HasPrefix(err.Error(), "bad parameters for "+tt.job.Type()+": ") {
				t.Errorf("message %q does not start with the job", err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
			// Split and NewAggregate refuse them too.
			if _, err := tt.job.NewAggregate(json.RawMessage(tt.params)); !errors.Is(err, jobs.ErrBadParams) {
				t.Errorf("NewAggregate: %v", err)
			}
			if _, err := tt.job.Split(t.Context(), jobstest.NewEnv(), json.RawMessage(tt.params)); !errors.Is(err, jobs.ErrBadParams) {
				t.Errorf("Split: %v", err)
			}
		})
	}
}

func TestValidate_GoodParams(t *testing.T) {
	tests := []struct {
		job    jobs.Job
		params string
	}{
		{primesJob, `{"from": 0, "to": 10000000, "shards": 100}`},
		{primesJob, `{"to": 1, "shards": 1}`},
		{primesJob, `{"from": 5, "to": 10, "shards": 5}`},
		{primesJob, `{"to": 1125899906842624, "shards": 1000000}`},
		{primesJob, ` {"to": 10, "shards": 1, "from": null} `},
		{piJob, `{"samples": 1, "shards": 1}`},
		{piJob, `{"samples": 100000000, "shards": 100, "seed": 18446744073709551615}`},
		{piJob, `{"samples": 1000000000000000, "shards": 1000000}`},
		{wordcount{}, `{"container": "corpus"}`},
		{wordcount{}, `{"container": "a-b-c", "prefix": "books/", "top": 0, "shard_bytes": 1}`},
		{wordcount{}, `{"container": "` + strings.Repeat("a", 63) + `", "top": 10000, "shard_bytes": 1073741824}`},
		{sleep{}, `{"shards": 1}`},
		{sleep{}, `{"shards": 1000000, "duration": "1h", "fail_rate": 1, "seed": 3}`},
		{sleep{}, `{"shards": 10, "duration": "0s", "fail_rate": 0, "fail_always": [0, 9, 9], "panic_always": [5]}`},
	}
	for _, tt := range tests {
		if err := tt.job.Validate(json.RawMessage(tt.params)); err != nil {
			t.Errorf("%s.Validate(%s): %v", tt.job.Type(), tt.params, err)
		}
	}
}

func TestValidate_OversizedParams(t *testing.T) {
	params := `{"container": "corpus", "prefix": "` + strings.Repeat("x", jobs.MaxSpecBytes) + `"}`
	err := wordcount{}.Validate(json.RawMessage(params))
	if !errors.Is(err, jobs.ErrBadParams) || !strings.Contains(err.Error(), "the limit is 65536") {
		t.Errorf("Validate of %d bytes: %v", len(params), err)
	}
}

func TestParamError_Is(t *testing.T) {
	err := error(badParam("primes", "to", "x"))
	if !errors.Is(err, jobs.ErrBadParams) || errors.Is(err, jobs.ErrUnknownType) || errors.Is(err, jobs.ErrBadShard) {
		t.Errorf("jobs.ParamError matches wrongly")
	}
	wrapped := errors.Join(errors.New("submit"), err)
	if !errors.Is(wrapped, jobs.ErrBadParams) {
		t.Errorf("wrapped jobs.ParamError does not match jobs.ErrBadParams")
	}
}
