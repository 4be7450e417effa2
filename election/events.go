package election

import "time"

// EventKind names a transition of an elector. Tools and tests subscribe to these (Config.OnEvent)
// instead of reading log lines; the log lines are for people.
type EventKind string

// The transitions an elector reports.
const (
	// EventElected: this process acquired the lease and stamped a new epoch (Event.Term).
	EventElected EventKind = "elected"
	// EventLost: the term ended because the lease was lost or could no longer be trusted (refused
	// renewal, safety deadline, unhealthy coordinator); Event.Err says why.
	EventLost EventKind = "lost"
	// EventSteppedDown: the term ended by choice (lead returned, or the process is stopping).
	EventSteppedDown EventKind = "stepped_down"
	// EventReleased: this process released the lease after its term.
	EventReleased EventKind = "released"
	// EventSuspected: this follower heard no heartbeat of the term Event.Term (Epoch, Identity
	// of the suspected leader) for SuspicionTimeout and is checking its lease.
	EventSuspected EventKind = "suspected"
	// EventBrokeLease: this follower broke the lease of the silent term Event.Term (the epoch
	// broken and its leader) and campaigns at once.
	EventBrokeLease EventKind = "broke_lease"
	// EventBeatsPaused: this leader's renewal has not succeeded for RenewStall (it may be cut off
	// from storage), so it stopped beating; a follower that reaches storage breaks its lease.
	EventBeatsPaused EventKind = "beats_paused"
	// EventProbing: this follower heard no beat of the term Event.Term for Config.ProbeAfter and
	// sent the first probe of this silence (the fast path's first step; Debug-level, for timing).
	EventProbing EventKind = "probing"
	// EventNoResponders: this follower's probes of the silent term Event.Term found no
	// responders over Config.ProbeConfirm (its process is gone); it checks and breaks the lease
	// now, without waiting for SuspicionTimeout. The takeover came from the fast path.
	EventNoResponders EventKind = "no_responders"
	// EventLeaseRebuilt: this leader found its lease blob (or its container) missing, created
	// it again, acquired it with the term's lease ID and stamped the term's epoch: the term goes
	// on. Event.Err says what was missing.
	EventLeaseRebuilt EventKind = "lease_rebuilt"
	// EventColdStart: this process, starting, found the lease held by a term it has heard no
	// beat of, and watches that term as if it had heard it at start: a dead term is broken (fenced)
	// after a probe or SuspicionTimeout, instead of waiting out the lease.
	EventColdStart EventKind = "cold_start"
)

// Event is one transition of an elector.
type Event struct {
	Kind EventKind
	// Term is the term the event is about (Epoch, Identity, Since; LeaseID is left empty).
	Term Term
	// Err says why a term ended (EventLost, EventSteppedDown); nil otherwise.
	Err error
	// At is when it happened (wall clock).
	At time.Time
}

// emit calls Config.OnEvent, if set. OnEvent runs on the elector's goroutines and must not block.
func (e *Elector) emit(kind EventKind, t Term, err error) {
	if e.cfg.OnEvent == nil {
		return
	}
	t.LeaseID = ""
	e.cfg.OnEvent(Event{Kind: kind, Term: t, Err: err, At: time.Now()})
}
