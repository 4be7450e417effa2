package main

import (
	"bytes"
	"context"
	"iter"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
)

// Sales is the job: its parameters are a jobs.BlobInput, its map shards jobs.BlobRanges of CSV
// blobs of "customer,cents" lines, its keys customers and its values amounts in cents.
type Sales struct{}

func (Sales) Split(ctx context.Context, env jobs.Env, in jobs.BlobInput) ([]jobs.BlobRange, error) {
	return in.Split(ctx, env)
}

// Map emits (customer, cents) for each line; a header line ("customer,...") and blank lines are
// skipped, and a line that is not customer,cents fails the task with the blob and offset.
func (Sales) Map(ctx context.Context, env jobs.Env, r jobs.BlobRange, emit jobs.Emitter[string, int64]) error {
	return jobs.Lines(ctx, env, r, func(line []byte) error {
		customer, cents, _ := bytes.Cut(line, []byte(","))
		if len(line) == 0 || string(customer) == "customer" {
			return nil
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(cents)), 10, 64)
		emit(string(customer), n)
		return err
	})
}

// Combine adds amounts on the map side, so a map task writes one value per customer.
func (Sales) Combine(a, b int64) int64 { return a + b }

func (Sales) Reduce(_ context.Context, customer string, amounts iter.Seq[int64], emit func(int64)) error {
	var total int64
	for a := range amounts {
		total += a
	}
	emit(total)
	return nil
}
