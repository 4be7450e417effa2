// Command histogram is a mapagg worker with a job type of its own, "histogram": a log₂ histogram
// of the non-negative integers in a set of blobs, one per line (latencies, sizes). It is the
// stock worker command line (run, submit, status, result, cancel) with one more job type:
//
//	histogram run &
//	histogram submit --type histogram --params '{"container": "data", "prefix": "latency/"}' --wait
//
// The result is 65 counts: count k is how many numbers v have bits.Len64(v) == k, that is
// 2^(k-1) ≤ v < 2^k (count 0 is the zeros). Blobs are cut into ranges of "shard_bytes" (default
// 1 MiB), one per shard; a line belongs to the range that holds its first byte.
package main

import (
	"bytes"
	"context"
	"log"
	"math/bits"
	"strconv"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/node"
)

// Histogram is the job: its parameters are a jobs.BlobInput, its shards jobs.BlobRanges.
type Histogram struct{}

// Counts is a partial result, and the answer: Counts[k] numbers had bits.Len64(v) == k.
type Counts [65]int64

func (Histogram) Split(ctx context.Context, env jobs.Env, in jobs.BlobInput) ([]jobs.BlobRange, error) {
	return in.Split(ctx, env)
}

func (Histogram) Map(ctx context.Context, env jobs.Env, r jobs.BlobRange) (c Counts, err error) {
	err = jobs.Lines(ctx, env, r, func(line []byte) error {
		v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 64)
		c[bits.Len64(v)]++
		return err
	})
	return c, err
}

func (Histogram) Merge(a, b Counts) Counts {
	for k := range a {
		a[k] += b[k]
	}
	return a
}

func main() {
	reg := builtin.Registry() // primes, wordcount, regroup, …: the stock worker's types
	if err := reg.Register(jobs.Typed("histogram", Histogram{})); err != nil {
		log.Fatal(err)
	}
	node.Main(node.Options{Registry: reg})
}
