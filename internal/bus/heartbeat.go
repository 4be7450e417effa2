package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/election"
)

// CtlHeartbeat is the core-NATS subject (without the prefix) of the leader's heartbeats.
const CtlHeartbeat = "ctl.heartbeat"

// CtlHeartbeatSuccessors is the subject of the beats only the named successors hear
// (election.SuccessorHeartbeats): every other beat of a leader that names successors.
const CtlHeartbeatSuccessors = "ctl.heartbeat.successors"

// SourceControl names refused control messages (heartbeats) in the dead-letter stream and in
// OnRefused.
const SourceControl = "control"

// ErrNotConnected is returned by Heartbeats.Publish while the connection to NATS is down: a beat
// is only worth sending now, so it is not buffered for the reconnect.
var ErrNotConnected = errors.New("not connected to nats")

// Heartbeats is election.SuccessorHeartbeats over core NATS: <prefix>.ctl.heartbeat reaches every
// process, <prefix>.ctl.heartbeat.successors the named successors only. Every beat carries
// the cluster key's MAC (MACHeader over the subject and the body); a beat without a valid one is
// counted (Unverified), dead-lettered (at most deadControlPerSec a second) and never handed to
// the elector. A follower's Healthy is Health: its own round trips, not the client's status.
type Heartbeats struct {
	b          *Bus
	subject    string
	successors string
	invalid    atomic.Uint64
	unver      atomic.Uint64
	limit      rateLimit
}

var _ election.SuccessorHeartbeats = (*Heartbeats)(nil)

// Heartbeats returns the heartbeat transport of this connection. It starts the health prober.
func (b *Bus) Heartbeats() *Heartbeats {
	b.Health()
	return &Heartbeats{b: b, subject: b.names.Control(CtlHeartbeat), successors: b.names.Control(CtlHeartbeatSuccessors)}
}

// Publish implements election.Heartbeats. It returns ErrNotConnected instead of buffering a
// beat while reconnecting (a stale beat arriving later would vouch for a leader that may be dead).
func (h *Heartbeats) Publish(ctx context.Context, b election.Beat) error {
	return h.publish(ctx, h.subject, b)
}

// PublishSuccessors implements election.SuccessorHeartbeats, as Publish on the successors'
// subject.
func (h *Heartbeats) PublishSuccessors(ctx context.Context, b election.Beat) error {
	return h.publish(ctx, h.successors, b)
}

func (h *Heartbeats) publish(ctx context.Context, subject string, b election.Beat) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	keys := h.b.cfg.Keys
	if keys == nil {
		return fmt.Errorf("publish heartbeat: %w", ErrNoClusterKey)
	}
	if !h.b.nc.IsConnected() {
		return fmt.Errorf("publish heartbeat: %w", ErrNotConnected)
	}
	data, err := EncodeBeat(b)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(MACHeader, keys.Sign(subject, "", data))
	if err := h.b.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("publish heartbeat: %w", err)
	}
	return nil
}

// Subscribe implements election.Heartbeats. Messages that are not valid beats are dropped and
// counted (Invalid); beats without a valid MAC are refused (Unverified).
func (h *Heartbeats) Subscribe(fn func(election.Beat)) (stop func(), err error) {
	return h.subscribe(h.subject, fn)
}

// SubscribeSuccessors implements election.SuccessorHeartbeats, as Subscribe on the successors'
// subject.
func (h *Heartbeats) SubscribeSuccessors(fn func(election.Beat)) (stop func(), err error) {
	return h.subscribe(h.successors, fn)
}

func (h *Heartbeats) subscribe(subject string, fn func(election.Beat)) (stop func(), err error) {
	health := h.b.Health()
	sub, err := h.b.nc.Subscribe(subject, func(m *nats.Msg) {
		health.Heard() // the server delivered it, whoever sent it
		if err := h.verify(m); err != nil {
			h.refuse(m, err)
			return
		}
		b, err := DecodeBeat(m.Data)
		if err != nil {
			h.invalid.Add(1)
			return
		}
		fn(b)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to heartbeats: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (h *Heartbeats) verify(m *nats.Msg) error {
	keys := h.b.cfg.Keys
	if keys == nil {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, ErrNoClusterKey)
	}
	return keys.Verify(m.Subject, "", m.Data, m.Header.Get(MACHeader))
}

// refuse counts an unverified beat and dead-letters it without waiting (it runs on the
// subscription's goroutine). Beyond the rate limit it is only counted.
func (h *Heartbeats) refuse(m *nats.Msg, why error) {
	h.unver.Add(1)
	if h.b.cfg.OnRefused != nil {
		h.b.cfg.OnRefused(SourceControl, m.Subject, why)
	}
	if !h.limit.allow(time.Now(), deadControlPerSec) {
		return
	}
	_ = h.b.deadLetterAsync(SourceControl, m, why.Error())
}

// deadControlPerSec bounds the dead letters of refused control messages: a flood of forgeries
// is counted in full but stores at most this many a second.
const deadControlPerSec = 10

// Healthy implements election.Heartbeats: Health, the process's own round trips to the server.
func (h *Heartbeats) Healthy() bool { return h.b.Health().Healthy() }

// Invalid is the number of authenticated messages on the heartbeat subject that were not valid
// beats.
func (h *Heartbeats) Invalid() uint64 { return h.invalid.Load() }

// Unverified is the number of messages on the heartbeat subject refused for want of a valid MAC.
func (h *Heartbeats) Unverified() uint64 { return h.unver.Load() }

// beatWire is the JSON form of a beat.
type beatWire struct {
	Epoch  uint64 `json:"epoch"`
	Leader string `json:"leader"`
	Seq    uint64 `json:"seq"`
	Sent   int64  `json:"sent_unix_nano"`
	// Answers: the term answers probes on <prefix>.ctl.term.<epoch> (absent from older versions).
	Answers bool `json:"answers,omitempty"`
	// Next: the followers that take over first (election.Beat.Successors; absent from older
	// versions).
	Next []string `json:"next,omitempty"`
}

const maxBeatSize = 2048

// EncodeBeat is the wire form of b.
func EncodeBeat(b election.Beat) ([]byte, error) {
	if err := checkBeat(b.Epoch, b.Identity, b.Successors); err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	return json.Marshal(beatWire{Epoch: b.Epoch, Leader: b.Identity, Seq: b.Seq, Sent: b.Sent.UnixNano(), Answers: b.Answers, Next: b.Successors})
}

// DecodeBeat parses a beat and refuses anything a leader could not have sent.
func DecodeBeat(data []byte) (election.Beat, error) {
	if len(data) > maxBeatSize {
		return election.Beat{}, fmt.Errorf("decode heartbeat: %d bytes, at most %d", len(data), maxBeatSize)
	}
	var w beatWire
	if err := json.Unmarshal(data, &w); err != nil {
		return election.Beat{}, fmt.Errorf("decode heartbeat: %w", err)
	}
	if err := checkBeat(w.Epoch, w.Leader, w.Next); err != nil {
		return election.Beat{}, fmt.Errorf("decode heartbeat: %w", err)
	}
	return election.Beat{Epoch: w.Epoch, Identity: w.Leader, Seq: w.Seq, Sent: time.Unix(0, w.Sent), Answers: w.Answers, Successors: w.Next}, nil
}

func checkBeat(epoch uint64, leader string, next []string) error {
	if epoch == 0 {
		return errors.New("epoch 0 (terms start at 1)")
	}
	if err := checkIdentity("leader", leader); err != nil {
		return err
	}
	if len(next) > election.MaxSuccessors {
		return fmt.Errorf("%d successors, at most %d", len(next), election.MaxSuccessors)
	}
	for _, id := range next {
		if err := checkIdentity("successor", id); err != nil {
			return err
		}
	}
	return nil
}

func checkIdentity(what, id string) error {
	if id == "" || len(id) > 256 {
		return fmt.Errorf("%s identity of %d characters, want 1 to 256", what, len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return fmt.Errorf("%s identity is not printable ASCII", what)
		}
	}
	return nil
}
