package jobstest_test

import (
	"bufio"
	"context"
	"fmt"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// lineSum sums the integers of a blob, one per line; a shard is a blob name.
type lineSum struct{}

type lineSumParams struct {
	Container string `json:"container" jobs:"required"`
}

func (lineSum) Split(ctx context.Context, env jobs.Env, p lineSumParams) ([][2]string, error) {
	blobs, err := env.ListBlobs(ctx, p.Container, "")
	var shards [][2]string
	for _, b := range blobs {
		shards = append(shards, [2]string{p.Container, b.Name})
	}
	return shards, err
}

func (lineSum) Map(ctx context.Context, env jobs.Env, s [2]string) (int64, error) {
	r, err := env.ReadRange(ctx, s[0], s[1], 0, 1<<20)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var sum int64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, sc.Err()
}

func (lineSum) Merge(a, b int64) int64 { return a + b }

// A job that reads blobs, run over an in-memory Env. In a test, jobstest.Run(t, job, env, params)
// does the same and fails the test at the first broken rule.
func ExampleCheck() {
	env := jobstest.NewEnv()
	env.Put("numbers", "a.txt", []byte("1\n2\n3\n"))
	env.Put("numbers", "b.txt", []byte("10\n20\n"))
	res, err := jobstest.Check(jobs.Typed("linesum", lineSum{}), env, `{"container": "numbers"}`)
	fmt.Println(string(res), err)
	// Output: 36 <nil>
}
