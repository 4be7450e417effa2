package main

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

var histogram = jobs.Typed("histogram", Histogram{})

// numbers returns n lines of numbers drawn from seed, spread over many orders of magnitude, and
// their histogram computed directly.
func numbers(seed uint64, n int) ([]byte, Counts) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	var want Counts
	for range n {
		v := rng.Uint64() >> rng.IntN(65)
		fmt.Fprintf(&b, "%d\n", v)
		want[bits.Len64(v)]++
	}
	return []byte(b.String()), want
}

func TestHistogram(t *testing.T) {
	env := jobstest.NewEnv()
	var want Counts
	for i := range 3 {
		data, w := numbers(uint64(i), 200)
		env.Put("data", fmt.Sprintf("latency/%d.txt", i), data)
		want = Histogram{}.Merge(want, w)
	}
	env.Put("data", "other/x.txt", []byte("not a number\n"))
	for _, size := range []int{5, 64, 0} {
		params := fmt.Sprintf(`{"container": "data", "prefix": "latency/", "shard_bytes": %d}`, size)
		var got Counts
		if err := json.Unmarshal(jobstest.Run(t, histogram, env, params), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("shard_bytes %d: %v, want %v", size, got, want)
		}
	}
}

func TestHistogram_Errors(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("data", "bad.txt", []byte("1\n2\nx3\n"))
	_, err := jobstest.Check(histogram, env, `{"container": "data"}`)
	if err == nil || !strings.Contains(err.Error(), `data/bad.txt: line at byte 4: strconv.ParseUint: parsing "x3": invalid syntax`) {
		t.Errorf("a line that is not a number: %v", err)
	}
	for params, want := range map[string]string{
		`{}`:                                `"container" is required`,
		`{"container": "Data"}`:             `"container" must be 3 to 63 characters`,
		`{"container": "data", "width": 1}`: `unknown field "width"; allowed fields: container, job, prefix, shard_bytes`,
	} {
		if err := histogram.Validate([]byte(params)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", params, err, want)
		}
	}
}

func FuzzHistogramAggregate(f *testing.F) {
	_, c := numbers(1, 10)
	seed, _ := json.Marshal(c)
	jobstest.FuzzAggregate(f, histogram, `{"container": "data"}`, seed, []byte(`[1,2]`), []byte(`null`))
}
