package coordinator

import (
	"log/slog"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/coordinator/jobread"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/coordinator/schedule"
	"github.com/mapagg/mapagg/jobs"
)

// term is one leadership term: the loop that owns the jobs' state, dispatch and merging (raft's
// leaderLoop). The rest of the term's work is done by its components, each with its own state:
// intake, the scheduler, the lifecycle (retries, retention, clean-up) and the checkpointer.
type term struct {
	// What the term takes from its Coordinator.
	cfg   Config
	store Store
	bus   Bus
	env   jobs.Env
	beat  func() // the loop turned (Coordinator.Healthy)
	pace  *shardPace

	fence   *fence.Fence
	rep     reporter // the term's log and events, as its components have them
	elected time.Time
	log     *slog.Logger

	tab    *jobTable            // which jobs the term holds (jobtable.go)
	in     *intake              // jobs in from the queue, and waiting jobs (intake.go)
	sched  *schedule.Scheduler  // schedule ticks (schedule.go)
	life   *lifecycle.Lifecycle // clean-up, retries, retention (finish.go, lifecycle/)
	ck     *checkpointer        // checkpoint writing (checkpoint.go)
	plans  *planner             // splitting jobs, and their plans (plan.go)
	send   *shardSender         // publishing shards (dispatch.go)
	reader jobread.Reader       // jobs the term does not hold

	merged int64 // results merged this term

	dispatched chan dispatchEvent // from dispatchers
	cancels    chan string        // from NATS hints
	hints      cancelHints        // hints of jobs not held yet (cancel.go, smalljob.go); loop only
	stageErr   chan error         // from stages of their own (schedules, retention): the term must end
	kick       chan struct{}      // a job ended: rescan soon, for the jobs waiting after it
	keyedLost  chan keyedLoss     // from map manifest writers: committed map runs gone (keyedterm.go)
	looked     chan []repairLook  // from self-repair's pass: the streams' state (repair.go)
	looking    bool               // a self-repair pass runs

	dispatchers sync.WaitGroup
	cleanups    sync.WaitGroup

	fair fairState // fair dispatch between the running jobs of a type (fair.go)
}

var _ runHost = (*term)(nil) // the term hosts its jobs' runners

// repairLook is one job's look: the shards merged when it began, and how many messages of the
// job the two streams held.
type repairLook struct {
	id      string
	done    int
	backlog uint64
}

// keyedLoss is a storage check's news for the loop: the committed map runs (or, with outputs,
// output blobs) of a job that storage no longer has whole. None: the check found every one (the
// map manifest is stored).
type keyedLoss struct {
	job     string
	run     *keyedRun      // the run that started the check
	check   int            // keyedRun.checks (outChecks) when the check started
	outputs bool           // a check of outputs (blobs by partition), not of map runs
	blobs   map[int]string // task → its committed blob
}

// cancelHints remembers cancel hints of jobs the term does not hold yet (a light job between
// its message and its adoption), for a while.
type cancelHints map[string]time.Time

const cancelHintTTL = time.Minute

func (h cancelHints) add(id string, now time.Time) {
	if len(h) >= 4096 {
		for k, at := range h {
			if now.Sub(at) > cancelHintTTL {
				delete(h, k)
			}
		}
		if len(h) >= 4096 {
			clear(h)
		}
	}
	h[id] = now
}

// take reports (and forgets) a hint for id.
func (h cancelHints) take(id string, now time.Time) bool {
	at, ok := h[id]
	delete(h, id)
	return ok && now.Sub(at) <= cancelHintTTL
}

// fairState is the loop's fair-dispatch bookkeeping.
type fairState struct {
	last  time.Time
	types map[string]*typeRate
}

// typeRate is one job type's measured merge rate.
type typeRate struct {
	perSec float64
	budget int
	seen   time.Time // when the type last had a job
}
