package coordinator

import (
	"context"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Cancelling: a hint on NATS (checked against the cancel marker in storage), the markers read
// on each rescan, and the cancel itself, which ends the job through finish.go.

// onCancelHint passes a cancel hint to the loop only when the job's cancel marker exists in
// storage: hints travel on core NATS unauthenticated, and anyone who can publish there must not
// be able to cancel a job. It runs on the subscription's goroutine, not the loop's, so a flood of
// hints delays only other hints (the channel drops what the loop cannot take).
func (t *term) onCancelHint(ctx context.Context, id string) {
	if protocol.CheckID(id) != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ok, err := t.store.Exists(rctx, protocol.CancelBlob(id)); err != nil || !ok {
		if err == nil {
			t.log.Warn("cancel hint without a cancel marker ignored", "job", id)
		}
		return // a storage error: the rescan reads the marker later
	}
	nonBlocking(t.cancels, id)
}

// checkCancels looks for cancel markers of active jobs (a backstop for the NATS hint).
func (t *term) checkCancels(ctx context.Context) {
	for j := range t.tab.all() {
		if j.cp.State.Terminal() {
			continue
		}
		if ok, err := t.store.Exists(ctx, protocol.CancelBlob(j.id)); err == nil && ok {
			t.cancel(ctx, j.id, "cancelled by user")
		}
	}
}

// cancel ends a running job as cancelled (or failed, via fail); the terminal checkpoint is
// written at the next checkpoint tick, then its queued shards are purged.
func (t *term) cancel(ctx context.Context, id, why string) {
	j := t.tab.get(id)
	if j == nil {
		t.hints.add(id, time.Now()) // a light job not adopted yet (smalljob.go)
		t.tab.setWaiting(id, false) // a waiting job: claim reads the marker and ends it
		if err := t.ensure(ctx, id); err != nil || t.tab.get(id) == nil {
			return
		}
		j = t.tab.get(id)
	}
	t.end(j, jobs.StateCancelled, why)
}
