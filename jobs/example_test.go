package jobs_test

import (
	"context"
	"fmt"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// SumSquares is a job: the sum of i² for 0 ≤ i < n, in ranges.
type SumSquares struct{}

// Params are its parameters, decoded from JSON and validated once.
type Params struct {
	N      int64 `json:"n" jobs:"required"`
	Shards int   `json:"shards" jobs:"required"`
}

func (p Params) Validate() error {
	if p.N < 1 || p.N > 1_000_000 {
		return jobs.BadParam("n", `"n" must be between 1 and 1000000 (got %d)`, p.N)
	}
	if p.Shards < 1 || int64(p.Shards) > p.N {
		return jobs.BadParam("shards", `"shards" must be between 1 and n (got %d)`, p.Shards)
	}
	return nil
}

// Span is a shard: the numbers Lo ≤ i < Hi.
type Span struct{ Lo, Hi int64 }

func (SumSquares) Split(_ context.Context, _ jobs.Env, p Params) ([]Span, error) {
	var spans []Span
	for i := range int64(p.Shards) {
		spans = append(spans, Span{p.N * i / int64(p.Shards), p.N * (i + 1) / int64(p.Shards)})
	}
	return spans, nil
}

func (SumSquares) Map(_ context.Context, _ jobs.Env, s Span) (int64, error) {
	var sum int64
	for i := s.Lo; i < s.Hi; i++ {
		sum += i * i
	}
	return sum, nil
}

func (SumSquares) Merge(a, b int64) int64 { return a + b }

// A whole job in typed Go: parameters, shards and partials are the author's types; Typed makes it
// a jobs.Job. A real program registers it and runs the node:
//
//	func main() {
//		if err := jobs.Register(jobs.Typed("sumsq", SumSquares{})); err != nil {
//			log.Fatal(err)
//		}
//		node.Main(node.Options{Registry: jobs.Default()})
//	}
//
// Here it runs in-process with jobstest, which also checks the job's contract.
func Example() {
	job := jobs.Typed("sumsq", SumSquares{})
	res, err := jobstest.Check(job, nil, `{"n": 1000, "shards": 4}`)
	fmt.Println(string(res), err)

	// Bad parameters are refused at submit time, naming the field.
	fmt.Println(job.Validate([]byte(`{"n": 1000}`)))
	fmt.Println(job.Validate([]byte(`{"n": 1000, "shards": 0}`)))
	fmt.Println(job.Validate([]byte(`{"n": 1000, "shards": 4, "seed": 1}`)))
	// Output:
	// 332833500 <nil>
	// bad parameters for sumsq: "shards" is required
	// bad parameters for sumsq: "shards" must be between 1 and n (got 0)
	// bad parameters for sumsq: unknown field "seed"; allowed fields: n, shards
}
