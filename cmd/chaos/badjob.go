package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Bad-job faults: a job whose code panics on the leader is submitted beside the fault's job. The
// bad job must fail within badJobWithin, naming the panic and the user's frame; the leader must
// not change; the fault's job is judged exact as usual. Their clusters run the test worker
// (internal/harness/testworker: the stock binary plus the bad job types).

// badJobWithin bounds how long a bad job may take to fail.
const badJobWithin = 20 * time.Second

// verdictLeaderChanged: a bad job's code changed the leader (a term ended by its panic).
const verdictLeaderChanged = "LEADER CHANGED"

// injectBadJob submits a job of the bad type typ beside the fault's job. Its error must name the
// panic and frame, the user's function.
func injectBadJob(typ, frame string) func(context.Context, *faultRun) error {
	return func(ctx context.Context, f *faultRun) error {
		leader, epoch, err := f.leader(ctx)
		if err != nil {
			return err
		}
		cl := *f.c.Client
		cl.Registry = badjobs.Registry()
		id, err := cl.Submit(ctx, typ, json.RawMessage(`{"shards":8}`))
		if err != nil {
			return fmt.Errorf("submit %s: %w", typ, err)
		}
		start := time.Now()
		f.note("submitted %s job %s beside the job (leader %s, epoch %d)", typ, id, leader, epoch)
		st, ended := rig.WaitEnd(ctx, f.c, id, start.Add(badJobWithin))
		switch {
		case st == nil || !ended:
			f.fail(verdictStuck, fmt.Sprintf("%s job %s not ended %v after its submit (%s)", typ, id, badJobWithin, rig.Describe(st)))
		case st.State == jobs.StateWaiting:
			return fmt.Errorf("%s job %s waits: the workers lack its type (run the test worker, not --worker-bin)", typ, id)
		case st.State != jobs.StateFailed || !strings.Contains(st.Error, "panic") || !strings.Contains(st.Error, frame):
			f.fail(verdictWrong, fmt.Sprintf("%s job %s ended %s, want failed naming the panic and %s: %s", typ, id, st.State, frame, rig.Clip(st.Error, 300)))
		default:
			f.note("%s job failed %v after its submit: %s", typ, time.Since(start).Round(time.Millisecond), rig.Clip(st.Error, 300))
		}
		now, nowEpoch, err := f.leader(ctx)
		if err != nil {
			return err
		}
		if now != leader || nowEpoch != epoch {
			f.fail(verdictLeaderChanged, fmt.Sprintf("leader %s (epoch %d) became %s (epoch %d) while the %s job ran", leader, epoch, now, nowEpoch, typ))
		}
		for _, ev := range f.c.Events() {
			if ev.Kind == cluster.Elected && ev.Epoch > epoch {
				f.fail(verdictLeaderChanged, fmt.Sprintf("%s elected with epoch %d while the %s job ran", ev.Worker, ev.Epoch, typ))
				break
			}
		}
		// Stored as failed and cleaned up: nothing is left for a next leader to resume.
		if err := rig.WaitGone(ctx, rig.JobStore(f.c), protocol.ActiveBlob(id), 10*time.Second); err != nil {
			f.fail(verdictLeft, fmt.Sprintf("active marker of the %s job %s (%v)", typ, id, err))
		}
		f.healed = time.Now()
		return nil
	}
}
