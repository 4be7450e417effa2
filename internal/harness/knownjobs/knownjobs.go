// Package knownjobs holds built-in jobs whose exact answers are known in advance.
//
// The load test and the fault matrix check a cluster's results with them. A sleep job's index
// sum is n·(n−1)/2; the numbers of primes below 10⁷ and 2·10⁷ are public facts. A wordcount's
// answer is counted as its corpus is written. Check says whether a result is exactly right; it
// never accepts an approximate one.
package knownjobs

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mapagg/mapagg/builtin"
)

// Job is a job with a known exact answer.
type Job struct {
	Type   string
	Params json.RawMessage
	Shards int
	// Check returns nil for the exact result, else what is wrong with it.
	Check func(result json.RawMessage) error
}

func (j Job) String() string { return fmt.Sprintf("%s %s", j.Type, j.Params) }

// Sleep is a sleep job of shards shards of duration d (a Go duration, "" for none). Its exact
// result is {"shards": n, "index_sum": n·(n−1)/2}.
func Sleep(shards int, d string) Job {
	p, _ := json.Marshal(builtin.SleepParams{Shards: shards, Duration: d})
	return Job{Type: "sleep", Params: p, Shards: shards, Check: func(res json.RawMessage) error {
		var r builtin.SleepResult
		if err := json.Unmarshal(res, &r); err != nil {
			return fmt.Errorf("sleep result %s: %v", res, err)
		}
		n := uint64(shards)
		if r.Shards != n || r.IndexSum != n*(n-1)/2 {
			return fmt.Errorf("sleep result %s: want shards %d, index_sum %d", res, n, n*(n-1)/2)
		}
		return nil
	}}
}

// Pi holds π(x), the number of primes below x, for the ranges Primes accepts.
var Pi = map[uint64]uint64{10_000_000: 664_579, 20_000_000: 1_270_607}

// Primes counts the primes below to (a key of Pi) in shards shards. It panics for another to: the
// answer would not be known.
func Primes(to uint64, shards int) Job {
	want, ok := Pi[to]
	if !ok {
		panic(fmt.Sprintf("knownjobs.Primes: π(%d) unknown", to))
	}
	p, _ := json.Marshal(builtin.PrimesParams{To: to, Shards: shards})
	return Job{Type: "primes", Params: p, Shards: shards, Check: func(res json.RawMessage) error {
		var r builtin.PrimesResult
		if err := json.Unmarshal(res, &r); err != nil {
			return fmt.Errorf("primes result %s: %v", res, err)
		}
		if r.Count != want {
			return fmt.Errorf("primes result %s: want count %d (π(%d))", res, want, to)
		}
		return nil
	}}
}

// MonteCarloPi is a CPU-bound pi job of samples points in shards shards. Its answer is not known in
// advance, but the same parameters always give the same points. So Check takes the first result
// it sees as the answer and holds every later one to it.
func MonteCarloPi(samples int64, shards int) Job {
	p, _ := json.Marshal(builtin.PiParams{Samples: samples, Shards: shards, Seed: 42})
	var mu sync.Mutex
	var want *builtin.PiResult
	return Job{Type: "pi", Params: p, Shards: shards, Check: func(res json.RawMessage) error {
		var got builtin.PiResult
		if err := json.Unmarshal(res, &got); err != nil {
			return fmt.Errorf("pi result %s: %v", res, err)
		}
		if got.Samples != uint64(samples) {
			return fmt.Errorf("pi result %s: want %d samples", res, samples)
		}
		mu.Lock()
		defer mu.Unlock()
		if want == nil {
			want = &got
		} else if got != *want {
			return fmt.Errorf("pi result %s: the first run of the same job gave %+v", res, *want)
		}
		return nil
	}}
}
