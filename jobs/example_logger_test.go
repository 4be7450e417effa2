package jobs_test

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// CountLines counts the lines of blobs, and logs each blob it read.
type CountLines struct{}

type CountParams struct {
	Container string `json:"container" jobs:"required"`
}

func (CountLines) Split(ctx context.Context, env jobs.Env, p CountParams) ([]jobs.BlobInfo, error) {
	return env.ListBlobs(ctx, p.Container, "")
}

// Map logs through env.Logger(): on a worker the line goes to the job's log (worker logs JOB)
// with the worker, shard and attempt.
func (CountLines) Map(ctx context.Context, env jobs.Env, b jobs.BlobInfo) (int64, error) {
	r, err := env.ReadRange(ctx, "in", b.Name, 0, max(b.Size, 1))
	if err != nil {
		return 0, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, err
	}
	n := int64(strings.Count(string(data), "\n"))
	env.Logger().Info("counted", "blob", b.Name, "lines", n)
	return n, nil
}

func (CountLines) Merge(a, b int64) int64 { return a + b }

// A Map logs through env.Logger(); jobstest's Env keeps the lines for a test to read.
func ExampleEnv_logger() {
	env := jobstest.NewEnv()
	env.Put("in", "a.txt", []byte("one\ntwo\n"))
	res, err := jobstest.Check(jobs.Typed("countlines", CountLines{}), env, `{"container":"in"}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(res), strings.Contains(env.Logs(), `msg=counted blob=a.txt lines=2`))
	// Output: 2 true
}
