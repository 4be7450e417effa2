package rig

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// Leader reads who holds c's lease now, and fails when nobody does.
func Leader(ctx context.Context, c *cluster.Cluster) (*election.LeaderInfo, error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the leader: %w", err)
	}
	if l == nil {
		return nil, fmt.Errorf("nobody holds the lease")
	}
	return l, nil
}

// Kill is one signal sent to a worker process.
type Kill struct {
	Worker string
	Signal syscall.Signal
	Epoch  uint64    // the victim's term, when it led
	At     time.Time // when the signal was sent
	Exited time.Time // when the process had exited
}

// Signal sends sig to worker w, waits for it to exit and, with restart, starts it again under
// the same id (the cluster keeps its size).
func Signal(c *cluster.Cluster, w string, sig syscall.Signal, restart bool) (Kill, error) {
	at, err := c.Signal(w, sig)
	k := Kill{Worker: w, Signal: sig, At: at, Exited: time.Now()}
	if err != nil {
		return k, err
	}
	if restart {
		if _, err := c.StartWorker(w); err != nil {
			return k, fmt.Errorf("restart %s: %w", w, err)
		}
	}
	return k, nil
}

// KillAll SIGKILLs the workers ids, waits down and starts them again under their ids.
func KillAll(ctx context.Context, c *cluster.Cluster, ids []string, down time.Duration) error {
	for _, id := range ids {
		if _, err := c.Signal(id, syscall.SIGKILL); err != nil {
			return err
		}
	}
	if err := Sleep(ctx, down); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := c.StartWorker(id); err != nil {
			return fmt.Errorf("restart %s: %w", id, err)
		}
	}
	return nil
}

// KillLeader sends sig to the leader and learns the victim and its epoch. With expect, the
// lease must still name that term.
func KillLeader(ctx context.Context, c *cluster.Cluster, sig syscall.Signal, restart bool, expect *election.LeaderInfo) (Kill, error) {
	l, err := Leader(ctx, c)
	if err != nil {
		return Kill{}, err
	}
	if expect != nil && (l.ID != expect.ID || l.Epoch != expect.Epoch) {
		return Kill{}, fmt.Errorf("leader changed before the kill: expected %s (epoch %d), lease says %s (epoch %d)", expect.ID, expect.Epoch, l.ID, l.Epoch)
	}
	k, err := Signal(c, l.ID, sig, restart)
	k.Epoch = l.Epoch
	return k, err
}

// ErrNoElection is matched by WaitElected's and FailLeader's error when no leader was elected.
var ErrNoElection = errors.New("no leader elected")

// WaitElected waits up to within for an election of an epoch above epoch.
func WaitElected(ctx context.Context, c *cluster.Cluster, epoch uint64, within time.Duration) (cluster.Event, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ev, err := c.WaitEvent(wctx, func(e cluster.Event) bool { return e.Kind == cluster.Elected && e.Epoch > epoch })
	if err != nil {
		return ev, fmt.Errorf("%w after epoch %d within %v: %w", ErrNoElection, epoch, within, err)
	}
	return ev, nil
}

// LeaderFault says how FailLeader strikes the leader.
type LeaderFault struct {
	Signal  syscall.Signal
	Restart bool                 // start the victim again under its id (the cluster keeps its size)
	Expect  *election.LeaderInfo // the term the lease must still name; nil: whoever leads
	Within  time.Duration        // how long the next election may take
	Then    func() error         // runs right after the signal, before the wait (e.g. a cancel)
}

// Failover is a leader struck and the election that followed.
type Failover struct {
	Kill                   // the signal sent to the leader
	Elected  cluster.Event // the next term's election
	ToLeader time.Duration // signal → elected
}

// FailLeader signals c's leader as f says and waits for another worker's election.
func FailLeader(ctx context.Context, c *cluster.Cluster, f LeaderFault) (Failover, error) {
	k, err := KillLeader(ctx, c, f.Signal, f.Restart, f.Expect)
	fo := Failover{Kill: k}
	if err == nil && f.Then != nil {
		err = f.Then()
	}
	if err != nil {
		return fo, err
	}
	ev, err := WaitElected(ctx, c, k.Epoch, f.Within)
	if err != nil {
		return fo, fmt.Errorf("after %v of %s: %w", SigName(f.Signal), k.Worker, err)
	}
	fo.Elected, fo.ToLeader = ev, ev.Time.Sub(k.At)
	return fo, nil
}

// FirstMerge waits for the new term's first merge (WaitFirstMerge) and times it from the signal.
func (f Failover) FirstMerge(ctx context.Context, c *cluster.Cluster, ended <-chan struct{}) (time.Duration, bool) {
	return FirstMergeAfter(ctx, c, f.Elected.Epoch, f.At, ended)
}

// FirstMergeAfter waits for the first merge of the term epoch (WaitFirstMerge) and times it from
// struck.
func FirstMergeAfter(ctx context.Context, c *cluster.Cluster, epoch uint64, struck time.Time, ended <-chan struct{}) (time.Duration, bool) {
	if e, ok := WaitFirstMerge(ctx, c, epoch, ended); ok {
		return e.Time.Sub(struck), true
	}
	return 0, false
}

// SigName is a signal's conventional name ("SIGKILL").
func SigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return s.String()
}

// HandTo makes worker id c's leader: the other workers pause (SIGSTOP) and the leader stops
// gracefully, so its release pokes id. Then the others continue and the old leader restarts.
func HandTo(ctx context.Context, c *cluster.Cluster, id string) error {
	old, err := Leader(ctx, c)
	if err != nil {
		return err
	}
	var paused []string
	for _, w := range c.Running() {
		if w != old.ID {
			if p := c.Proc(w); p != nil && p.Signal(syscall.SIGSTOP) == nil {
				paused = append(paused, w)
			}
		}
	}
	_, err = c.Signal(old.ID, syscall.SIGTERM)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, werr := c.WaitLeader(lctx, func(l *election.LeaderInfo) bool { return l.ID == id && l.Epoch > old.Epoch })
	cancel()
	for _, w := range paused {
		_ = c.Proc(w).Signal(syscall.SIGCONT)
	}
	if _, serr := c.StartWorker(old.ID); serr != nil {
		return serr
	}
	if err != nil || werr != nil {
		return fmt.Errorf("hand the lease to %s: %v %v", id, err, werr)
	}
	return Sleep(ctx, 3*time.Second) // everyone hears the new leader's beats
}

// Detection is how the followers learned that a term ended, timed from the fault.
type Detection struct {
	Path   string        // the first no_responders or suspected event's kind; "" when none
	Detect time.Duration // fault → that event
	Break  time.Duration // fault → the first broke_lease; 0 when none
}

// Detected reads c's events of epoch at or after struck.
func Detected(c *cluster.Cluster, epoch uint64, struck time.Time) Detection {
	var d Detection
	for _, e := range c.Events() {
		if e.Epoch != epoch || e.Time.Before(struck) {
			continue
		}
		switch e.Kind {
		case string(election.EventNoResponders), string(election.EventSuspected):
			if d.Path == "" {
				d.Path, d.Detect = e.Kind, e.Time.Sub(struck)
			}
		case string(election.EventBrokeLease):
			if d.Break == 0 {
				d.Break = e.Time.Sub(struck)
			}
		}
	}
	return d
}

// RestartNATS SIGKILLs c's nats-server process and, down later, starts it again on the same
// port and store; the rig tracks its new pid. It returns when the kill landed.
func (r *Rig) RestartNATS(ctx context.Context, c *cluster.Cluster, down time.Duration) (time.Time, error) {
	np := c.NATSProcess()
	killed := time.Now()
	if np == nil {
		return killed, errors.New("the cluster has no nats-server process")
	}
	if err := np.Signal(syscall.SIGKILL); err != nil {
		return killed, err
	}
	if err := Sleep(ctx, down); err != nil {
		return killed, err
	}
	if err := np.Restart(); err != nil {
		return killed, err
	}
	r.Track(c)
	return killed, nil
}
