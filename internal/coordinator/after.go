package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Dependencies. A job submitted with --after waits until each job it names has succeeded: its
// first checkpoint is stored as waiting, with a reason that names the jobs, and its active
// marker. Every rescan claims it and looks at them again (cheaply: their status records, read
// with a HEAD, and their results); a job that ends here kicks a rescan, and again once its
// result is stored. The job is planned once all succeeded, and fails with a reason naming the
// first that failed, was cancelled or is gone.

// predecessors looks at the jobs spec waits for. It returns "" when all succeeded, else why the
// job waits (failed false) or why it cannot run (failed true).
func (in *intake) predecessors(ctx context.Context, spec *protocol.Spec) (reason string, failed bool, err error) {
	var pending []string
	for _, id := range spec.After {
		state, err := in.reader.JobState(ctx, id)
		if err != nil {
			return "", false, fmt.Errorf("state of job %s: %w", id, err)
		}
		// A failed job with retries left stands for its retry (retry.go).
		for hops := 0; state == jobs.StateFailed && hops <= protocol.MaxRetries; hops++ {
			next, err := in.reader.RetryOf(ctx, id)
			if err != nil {
				return "", false, err
			}
			if next == "" {
				break
			}
			id = next
			if state, err = in.reader.JobState(ctx, id); err != nil {
				return "", false, fmt.Errorf("state of job %s: %w", id, err)
			}
			if state == "" {
				state = jobs.StateQueued // the retry is not stored yet
			}
		}
		switch state {
		case jobs.StateSucceeded:
			// A keyed job's output manifest is copied by its clean-up, after the final
			// checkpoint: a job reading it as input waits for the copy (a kick follows). A
			// small value has no copy: the final checkpoint holds it.
			if ok, err := in.resultReadable(ctx, id); err != nil {
				return "", false, fmt.Errorf("result of job %s: %w", id, err)
			} else if !ok {
				pending = append(pending, id)
			}
		case "":
			return fmt.Sprintf("job %s it runs after does not exist (deleted?)", id), true, nil
		case jobs.StateFailed, jobs.StateCancelled:
			return fmt.Sprintf("job %s it runs after %s", id, state), true, nil
		default:
			pending = append(pending, id)
		}
	}
	if len(pending) == 0 {
		return "", false, nil
	}
	in.tab.after.Store(true)
	return "waiting for job " + strings.Join(pending, ", ") + " to succeed", false, nil
}

// after handles a queued job with predecessors (intake): it returns false when they all
// succeeded (the job is planned now); otherwise it stores the job as waiting, or failed, and
// takes its message off the queue.
func (in *intake) after(ctx context.Context, m queue.Message, id string, spec *protocol.Spec) bool {
	reason, failed, err := in.predecessors(ctx, spec)
	switch {
	case err != nil:
		in.log.Warn("job waits: cannot read its predecessors", "job", id, "err", err)
		return true // the message comes back
	case reason == "":
		return false
	}
	state := jobs.StateWaiting
	if failed {
		state = jobs.StateFailed
	}
	if !failed {
		// The marker goes first: a checkpoint without it would be lost to a storage rollback.
		if err := in.mark(ctx, id); err != nil {
			in.log.Warn("waiting job", "job", id, "err", err)
			return true
		}
	}
	_, err = in.writeFirst(ctx, id, spec.Type, state, reason, nil)
	switch {
	case errors.Is(err, store.ErrExists):
		in.planned(ctx, m, id)
		return true
	case err != nil:
		return true
	}
	in.log.Info("job after others", "job", id, "state", state, "reason", reason)
	if failed {
		in.emit(Event{Kind: EventJobFinished, Epoch: in.fence.Epoch, Job: id, State: string(state), Err: errors.New(reason)})
	} else {
		in.emit(Event{Kind: EventJobWaiting, Epoch: in.fence.Epoch, Job: id, Err: errors.New(reason)})
	}
	in.deleteMsg(ctx, m)
	return true
}

// stillAfter re-checks the predecessors of a waiting job (claim): true when it still waits (its
// reason updated) or ended here.
func (in *intake) stillAfter(ctx context.Context, cp *protocol.Checkpoint, etag store.ETag, spec *protocol.Spec) (bool, error) {
	if len(spec.After) == 0 {
		return false, nil
	}
	reason, failed, err := in.predecessors(ctx, spec)
	switch {
	case err != nil:
		return true, err
	case reason == "":
		return false, nil
	case failed:
		return true, in.endStored(ctx, cp, etag, jobs.StateFailed, reason)
	case reason != cp.Error:
		next := *cp
		next.Error = reason
		if _, err := in.putStored(ctx, &next, etag); err != nil {
			return true, err
		}
	}
	return true, nil
}

// resultReadable reports whether succeeded job id's result can be read: its copy is stored, or
// its final checkpoint holds a value that gets none (lifecycle.Lifecycle copies a keyed job's
// manifest and a large value only).
func (in *intake) resultReadable(ctx context.Context, id string) (bool, error) {
	if ok, err := in.store.Exists(ctx, protocol.ResultBlob(id)); err != nil || ok {
		return ok, err
	}
	data, _, err := in.store.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return false, err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return false, err
	}
	return !cp.ResultStored && len(cp.Result) > 0 && cp.Kind != protocol.KindKeyed && !protocol.IsOutputManifest(cp.Result), nil
}
