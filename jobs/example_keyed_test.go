package jobs_test

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// SalesByCustomer sums the amount per customer over CSV blobs of "customer,amount" lines.
type SalesByCustomer struct{}

func (SalesByCustomer) Split(ctx context.Context, env jobs.Env, in jobs.BlobInput) ([]jobs.BlobRange, error) {
	return in.Split(ctx, env)
}

func (SalesByCustomer) Map(ctx context.Context, env jobs.Env, r jobs.BlobRange, emit jobs.Emitter[string, int64]) error {
	return jobs.Lines(ctx, env, r, func(line []byte) error {
		customer, amount, _ := bytes.Cut(line, []byte(","))
		n, err := strconv.ParseInt(string(amount), 10, 64)
		if err != nil {
			return fmt.Errorf("line %q: %w", line, err)
		}
		emit(string(customer), n)
		return nil
	})
}

func (SalesByCustomer) Combine(a, b int64) int64 { return a + b }

func (SalesByCustomer) Reduce(_ context.Context, _ string, sums iter.Seq[int64], emit func(int64)) error {
	var total int64
	for s := range sums {
		total += s
	}
	emit(total)
	return nil
}

// A keyed job: every customer's total, written as key<TAB>value lines, sorted by key within a
// partition. In a cluster, register it with jobs.Keyed("sales", SalesByCustomer{}).
func ExampleKeyed() {
	env := jobstest.NewEnv()
	env.Put("sales", "2026-11.csv", []byte("ann,120\nbob,5\nann,30\n"))
	env.Put("sales", "2026-12.csv", []byte("cy,7\nbob,10\n"))
	job := jobs.Keyed("sales", SalesByCustomer{})
	recs, err := jobstest.CheckKeyed(job, env, `{"container": "sales"}`)
	for _, r := range recs {
		fmt.Println(r)
	}
	fmt.Println(err)
	// Unordered output:
	// ann	150
	// bob	15
	// cy	7
	// <nil>
}
