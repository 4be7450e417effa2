package jobs_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

var sumsq = jobs.Typed("sumsq", SumSquares{})

func TestTyped_Run(t *testing.T) {
	for _, tt := range []struct {
		params string
		want   string
	}{
		{`{"n": 1, "shards": 1}`, `0`},
		{`{"n": 1000, "shards": 7}`, `332833500`},
		{`{"n": 1000000, "shards": 100}`, `333332833333500000`},
	} {
		if got := jobstest.Run(t, sumsq, nil, tt.params); string(got) != tt.want {
			t.Errorf("%s: result %s, want %s", tt.params, got, tt.want)
		}
	}
}

func TestTyped_Params(t *testing.T) {
	for _, tt := range []struct {
		params, field, msg string
	}{
		{``, "n", `"n" is required`},
		{`[]`, "", `parameters must be a JSON object (got array)`},
		{`{"n": 5, "shards": 1, "N": 3}`, "N", `unknown field "N"; allowed fields: n, shards`},
		{`{"n": "5", "shards": 1}`, "n", `"n" must be an integer (got string)`},
		{`{"n": 5, "shards": 6}`, "shards", `"shards" must be between 1 and n (got 6)`},
		{`{"n": 5, "shards": null}`, "shards", `"shards" is required`},
	} {
		for _, err := range []error{sumsq.Validate(json.RawMessage(tt.params)), splitErr(tt.params), aggErr(tt.params)} {
			var pe *jobs.ParamError
			if !errors.As(err, &pe) || !errors.Is(err, jobs.ErrBadParams) || pe.Job != "sumsq" || pe.Field != tt.field ||
				!strings.Contains(err.Error(), tt.msg) {
				t.Errorf("%s: %#v, want a *ParamError of sumsq for %q saying %q", tt.params, err, tt.field, tt.msg)
			}
		}
	}
}

func splitErr(params string) error {
	_, err := sumsq.Split(context.Background(), nil, json.RawMessage(params))
	return err
}

func aggErr(params string) error {
	_, err := sumsq.NewAggregate(json.RawMessage(params))
	return err
}

// plainValidate returns a plain error from Validate, and has a Usage method.
type plainValidate struct {
	X int `json:"x" jobs:"required"`
}

func (p *plainValidate) Validate() error {
	if p.X < 0 {
		return errors.New("x must not be negative")
	}
	return nil
}

func (plainValidate) Usage() string { return `{"x": 1}` }

type noop[P any] struct{}

func (noop[P]) Split(context.Context, jobs.Env, P) ([]int, error)     { return []int{1}, nil }
func (noop[P]) Map(_ context.Context, _ jobs.Env, s int) (int, error) { return s, nil }
func (noop[P]) Merge(a, b int) int                                    { return a + b }

func TestTyped_ParamsValidateOnPointerAndUsage(t *testing.T) {
	j := jobs.Typed("plain", noop[plainValidate]{})
	err := j.Validate(json.RawMessage(`{"x": -1}`))
	var pe *jobs.ParamError
	if !errors.As(err, &pe) || pe.Job != "plain" || pe.Field != "" || err.Error() != "bad parameters for plain: x must not be negative" {
		t.Errorf("plain error from Validate: %#v", err)
	}
	err = j.Validate(json.RawMessage(`{}`))
	if err == nil || err.Error() != `bad parameters for plain: "x" is required; usage: {"x": 1}` {
		t.Errorf("missing required field: %v", err)
	}
	if err := j.Validate(json.RawMessage(`{"x": 1}`)); err != nil {
		t.Errorf("good parameters: %v", err)
	}
}

func TestTyped_PanicsOnNonStructParams(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "not a struct") {
			t.Errorf("recover() = %v", r)
		}
	}()
	jobs.Typed("bad", noop[int]{})
}

func TestTyped_SplitEncodesShardsAsJSON(t *testing.T) {
	shards, err := sumsq.Split(context.Background(), nil, json.RawMessage(`{"n": 10, "shards": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s", shards)
	if want := `[{"Lo":0,"Hi":3} {"Lo":3,"Hi":6} {"Lo":6,"Hi":10}]`; got != want {
		t.Errorf("shards %s, want %s", got, want)
	}
}

type hugeShard struct{}

func (hugeShard) Split(context.Context, jobs.Env, struct{}) ([]string, error) {
	return []string{"ok", strings.Repeat("x", jobs.MaxShardBytes)}, nil
}
func (hugeShard) Map(context.Context, jobs.Env, string) (int, error) { return 0, nil }
func (hugeShard) Merge(a, b int) int                                 { return a + b }

func TestTyped_SplitRefusesBigShard(t *testing.T) {
	_, err := jobs.Typed("huge", hugeShard{}).Split(context.Background(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "huge: encode shard 1: 4098 bytes, the limit is 4096") {
		t.Errorf("Split = %v", err)
	}
}

// checkedSpan refuses backwards spans.
type checkedSpan struct{ Lo, Hi int64 }

func (s checkedSpan) Validate() error {
	if s.Lo > s.Hi {
		return fmt.Errorf("span [%d, %d) is backwards", s.Lo, s.Hi)
	}
	return nil
}

type checked struct{}

func (checked) Split(context.Context, jobs.Env, struct{}) ([]checkedSpan, error) {
	return []checkedSpan{{0, 5}, {5, 10}}, nil
}
func (checked) Map(ctx context.Context, _ jobs.Env, s checkedSpan) (int64, error) {
	if _, ok := jobs.TaskFrom(ctx); !ok {
		return 0, errors.New("no task in the context")
	}
	return s.Hi - s.Lo, nil
}
func (checked) Merge(a, b int64) int64 { return a + b }

// Check: no more than 10 numbers in all.
func (checked) Check(_ struct{}, acc, n int64) error {
	if n < 0 || n > 10 || acc+n > 10 {
		return fmt.Errorf("%d numbers would exceed 10", acc+n)
	}
	return nil
}

func TestTyped_MapBadShard(t *testing.T) {
	j := jobs.Typed("checked", checked{})
	for _, shard := range []string{``, `null x`, `{"Lo": 5, "Hi": 4}`, `{"Lo": 1, "Hi": 2, "Mid": 1}`, `{"Lo": 1} {}`, `[1]`,
		`{"Lo": 1, "Hi": 2` + strings.Repeat(" ", jobs.MaxShardBytes) + `}`} {
		_, err := j.Map(context.Background(), nil, jobs.Task{Shard: []byte(shard)})
		if !errors.Is(err, jobs.ErrBadShard) || !strings.HasPrefix(err.Error(), "bad shard: checked: ") {
			t.Errorf("Map(%.40q) = %v, want jobs.ErrBadShard", shard, err)
		}
	}
	s, err := jobs.DecodeShard[checkedSpan]("checked", []byte(`{"Lo": 5, "Hi": 4}`))
	if err == nil || err.Error() != "bad shard: checked: span [5, 4) is backwards" || s != (checkedSpan{}) {
		t.Errorf("DecodeShard = %v, %v", s, err)
	}
	b, err := jobs.EncodeShard(checkedSpan{1, 2})
	if err != nil || string(b) != `{"Lo":1,"Hi":2}` {
		t.Errorf("EncodeShard = %s, %v", b, err)
	}
	p, err := j.Map(context.Background(), nil, jobs.Task{Shard: b})
	if err != nil || string(p) != "1" {
		t.Errorf("Map(%s) = %s, %v", b, p, err)
	}
}

func TestTyped_AggregateCheckAndErrors(t *testing.T) {
	j := jobs.Typed("checked", checked{})
	if got := jobstest.Run(t, j, nil, `{}`); string(got) != "10" {
		t.Fatalf("result %s", got)
	}
	agg, err := j.NewAggregate(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"4", "6"} {
		if err := agg.Merge([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "1", "-1", "x", "1 2", `"1"`, "1.5", "99999999999999999999"} {
		if err := agg.Merge([]byte(bad)); !errors.Is(err, jobs.ErrBadPartial) || !strings.HasPrefix(err.Error(), "bad partial: checked: ") {
			t.Errorf("Merge(%q) = %v, want jobs.ErrBadPartial", bad, err)
		}
	}
	for _, bad := range []string{"", "11", "-1", "x", "1 2", `"1"`, "1.5", "99999999999999999999"} {
		if err := agg.UnmarshalBinary([]byte(bad)); !errors.Is(err, jobs.ErrBadCheckpoint) || !strings.HasPrefix(err.Error(), "bad checkpoint: checked aggregate: ") {
			t.Errorf("UnmarshalBinary(%q) = %v, want jobs.ErrBadCheckpoint", bad, err)
		}
	}
	if b, err := agg.MarshalBinary(); err != nil || string(b) != "10" {
		t.Errorf("after refused merges and restores: %s, %v", b, err)
	}
	if err := agg.UnmarshalBinary([]byte("3")); err != nil {
		t.Fatal(err)
	}
	if res, err := agg.Result(); err != nil || string(res) != "3" {
		t.Errorf("Result after restoring 3: %s, %v", res, err)
	}
}

func TestTaskFrom(t *testing.T) {
	if _, ok := jobs.TaskFrom(context.Background()); ok {
		t.Error("TaskFrom of a bare context found a task")
	}
	j := jobs.Typed("attempt", attemptJob{})
	p, err := j.Map(context.Background(), nil, jobs.Task{JobID: "j1", Index: 3, Attempt: 2, Shard: []byte("0")})
	if err != nil || string(p) != `"j1/3/2"` {
		t.Errorf("Map = %s, %v", p, err)
	}
}

type attemptJob struct{}

func (attemptJob) Split(context.Context, jobs.Env, struct{}) ([]int, error) { return []int{0}, nil }
func (attemptJob) Map(ctx context.Context, _ jobs.Env, _ int) (string, error) {
	task, _ := jobs.TaskFrom(ctx)
	return fmt.Sprintf("%s/%d/%d", task.JobID, task.Index, task.Attempt), nil
}
func (attemptJob) Merge(a, b string) string { return a + b }

// fixed is a partial with its own binary form: 8 bytes, big-endian.
type fixed uint64

func (f fixed) MarshalBinary() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(f)), nil
}
func (f *fixed) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("%d bytes, want 8", len(b))
	}
	*f = fixed(binary.BigEndian.Uint64(b))
	return nil
}

type fixedJob struct{}

func (fixedJob) Split(context.Context, jobs.Env, struct{}) ([]int, error) { return []int{1, 2, 3}, nil }
func (fixedJob) Map(_ context.Context, _ jobs.Env, s int) (fixed, error)  { return fixed(s), nil }
func (fixedJob) Merge(a, b fixed) fixed                                   { return a + b }

func TestTyped_BinaryMarshalerIsUsed(t *testing.T) {
	j := jobs.Typed("fixed", fixedJob{})
	p, err := j.Map(context.Background(), nil, jobs.Task{Shard: []byte("7")})
	if err != nil || string(p) != "\x00\x00\x00\x00\x00\x00\x00\x07" {
		t.Errorf("Map = %q, %v", p, err)
	}
	if got := jobstest.Run(t, j, nil, `{}`); string(got) != "6" {
		t.Errorf("result %s", got)
	}
	agg, _ := j.NewAggregate(nil)
	if err := agg.Merge([]byte("7")); !errors.Is(err, jobs.ErrBadPartial) || !strings.Contains(err.Error(), "1 bytes, want 8") {
		t.Errorf("Merge of a short partial: %v", err)
	}
}

type nanJob struct{}

func (nanJob) Split(context.Context, jobs.Env, struct{}) ([]int, error) { return []int{1}, nil }
func (nanJob) Map(context.Context, jobs.Env, int) (float64, error)      { return math.Inf(1), nil }
func (nanJob) Merge(a, b float64) float64                               { return a + b }

func TestTyped_NaNPartialIsAClearError(t *testing.T) {
	_, err := jobs.Typed("nan", nanJob{}).Map(context.Background(), nil, jobs.Task{Shard: []byte("1")})
	if err == nil || !strings.Contains(err.Error(), "nan: encode partial") || !strings.Contains(err.Error(), "JSON holds no NaN or ±Inf") {
		t.Errorf("Map = %v", err)
	}
}

func TestTyped_ResultError(t *testing.T) {
	agg, err := jobs.Typed("stats", Stats{}).NewAggregate(json.RawMessage(`{"values": []}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agg.Result(); err == nil || err.Error() != "no values" {
		t.Errorf("Result of an empty stats = %v", err)
	}
}

func FuzzTypedShard(f *testing.F) {
	for _, s := range []string{`{"Lo":0,"Hi":3}`, `{"Lo":3,"Hi":1}`, `{"Lo":1e3,"Hi":2}`, `{"lo":1,"hi":2}`, `null`} {
		f.Add([]byte(s))
	}
	j := jobs.Typed("checked", checked{})
	f.Fuzz(func(t *testing.T, shard []byte) {
		p, err := j.Map(context.Background(), nil, jobs.Task{Shard: shard})
		if err != nil {
			if !errors.Is(err, jobs.ErrBadShard) {
				t.Fatalf("Map error %v is not jobs.ErrBadShard", err)
			}
			return
		}
		s, err := jobs.DecodeShard[checkedSpan]("checked", shard)
		if err != nil || fmt.Sprint(s.Hi-s.Lo) != string(p) {
			t.Fatalf("Map accepted %q as %+v (%v), partial %s", shard, s, err, p)
		}
	})
}

func FuzzTypedPartial(f *testing.F) {
	jobstest.FuzzAggregate(f, jobs.Typed("checked", checked{}), `{}`, []byte("3"), []byte("7"), []byte("11"), []byte("-1"), []byte("1e1"))
}

func FuzzTypedPartialStruct(f *testing.F) {
	jobstest.FuzzAggregate(f, jobs.Typed("stats", Stats{}), `{"values": [1]}`,
		[]byte(`{"N":1,"Sum":4,"Min":4,"Max":4}`), []byte(`{"N":0}`), []byte(`{"N":1,"n":2}`))
}

func FuzzTypedParams(f *testing.F) {
	jobstest.FuzzParams(f, sumsq, `{"n": 10, "shards": 2}`, `{"n": 0}`, `{"N": 1, "shards": 1}`, `[]`, `{"n": 1e2, "shards": 1}`)
}

type arrayJob struct{}

func (arrayJob) Split(context.Context, jobs.Env, struct{}) ([]int, error) { return []int{0, 1, 2}, nil }
func (arrayJob) Map(_ context.Context, _ jobs.Env, i int) (c [3]int64, _ error) {
	c[i] = 1
	return c, nil
}
func (arrayJob) Merge(a, b [3]int64) [3]int64 { return [3]int64{a[0] + b[0], a[1] + b[1], a[2] + b[2]} }

func TestTyped_ArrayPartialLengthIsChecked(t *testing.T) {
	j := jobs.Typed("array", arrayJob{})
	if got := jobstest.Run(t, j, nil, `{}`); string(got) != "[1,1,1]" {
		t.Errorf("result %s", got)
	}
	agg, _ := j.NewAggregate(nil)
	for _, bad := range []string{"[1,2]", "[1,2,3,4]", "[]"} {
		if err := agg.Merge([]byte(bad)); !errors.Is(err, jobs.ErrBadPartial) || !strings.Contains(err.Error(), "want 3") {
			t.Errorf("Merge(%s) = %v", bad, err)
		}
	}
	if err := agg.Merge([]byte("null")); err != nil {
		t.Errorf("Merge(null) = %v", err)
	}
}
