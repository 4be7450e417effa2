// Package jobstest checks a job against the contract the cluster relies on, in-process, as
// net/http/httptest and testing/fstest do for handlers and file systems.
//
// Run(t, job, env, params) runs a job as a cluster would: Validate, Split (twice: it must be
// deterministic), Map of every shard in a random order (failed attempts retried, some shards
// mapped twice: Map must be pure), and Merge of the partials in shard order and in shuffled
// orders, the aggregate checkpointed and restored on the way as a failover would. Every order must
// give the same result, which Run returns for the test to check:
//
//	func TestSumSquares(t *testing.T) {
//		got := jobstest.Run(t, jobs.Typed("sumsq", SumSquares{}), nil, `{"n": 1000, "shards": 7}`)
//		if string(got) != "332833500" {
//			t.Errorf("result %s", got)
//		}
//	}
//
// RunKeyed(t, job, env, params) does the same for a keyed job (jobs.KeyedJob): Map of every shard
// in a random order (some twice), then each key's values reduced in emit order, shuffled, and
// combined in random groupings; all must give the same records, which it returns.
//
// Env is an in-memory jobs.Env for jobs that read blobs (Put(container, name, data)). Check is Run
// without a *testing.T. FuzzAggregate and FuzzParams fuzz the decoders of outside input a job has:
// its partials and checkpoints, and its parameters.
//
// What it does not check: behaviour under real storage (timeouts, throttling), time limits, and
// memory use; a job that reads blobs should also run against Azurite (see examples/histogram).
package jobstest
