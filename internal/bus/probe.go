package bus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/election"
)

// CtlTerm is the core-NATS subject (without the prefix) under which the leader's term answers
// probes: <prefix>.ctl.term.<epoch>.
const CtlTerm = "ctl.term"

// TermProber is election.Prober over core NATS request/reply. The leader subscribes to its
// term's subject; a follower's request to it gets nats.ErrNoResponders (a 503 the server sends
// in the same round trip) once the leader's connection is gone. Answers are not signed: only
// "no responders" is acted on, and that only the server can say about a subscription it lacks.
type TermProber struct {
	b *Bus
}

var _ election.Prober = (*TermProber)(nil)

// TermProber returns the probe transport of this connection. It starts the health prober.
func (b *Bus) TermProber() *TermProber {
	b.Health()
	return &TermProber{b: b}
}

func (p *TermProber) subject(epoch uint64) string {
	return p.b.names.Control(CtlTerm + "." + strconv.FormatUint(epoch, 10))
}

// Answer implements election.Prober: it answers on the term's subject (the reply is the epoch)
// until stop. The subscription is flushed to the server before Answer returns, and nats.go sends
// it again after every reconnect before anything published later.
func (p *TermProber) Answer(t election.Term) (stop func(), err error) {
	nc := p.b.nc
	if !nc.IsConnected() {
		return nil, fmt.Errorf("answer probes: %w", ErrNotConnected)
	}
	reply := []byte(strconv.FormatUint(t.Epoch, 10))
	sub, err := nc.Subscribe(p.subject(t.Epoch), func(m *nats.Msg) { _ = m.Respond(reply) })
	if err != nil {
		return nil, fmt.Errorf("answer probes: %w", err)
	}
	if err := nc.FlushTimeout(p.b.cfg.CutOffAfter); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("answer probes: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Probe implements election.Prober: nil when something answered, election.ErrNoResponders when
// nothing subscribes to the term's subject, else the error (unknown).
func (p *TermProber) Probe(ctx context.Context, epoch uint64) error {
	nc := p.b.nc
	if !nc.IsConnected() {
		return fmt.Errorf("probe: %w", ErrNotConnected)
	}
	_, err := nc.RequestWithContext(ctx, p.subject(epoch), nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return election.ErrNoResponders
	default:
		return fmt.Errorf("probe: %w", err)
	}
}

// Session implements election.Prober: reconnections plus the times Health found the process cut
// off. It changes whenever this process's own link to the server was interrupted.
func (p *TermProber) Session() uint64 {
	return p.b.nc.Stats().Reconnects + p.b.Health().Cuts()
}

// reconnectDelay is the wait before each round of reconnect attempts. The first comes after a
// few milliseconds: a connection the server dropped while staying up (a leader's, whose term's
// answer is gone meanwhile) is back within a blip, far inside the followers' confirmation
// window. Later rounds wait 250–350ms, so that a restarting server is not hammered.
func reconnectDelay(attempts int) time.Duration {
	if attempts <= 1 {
		return 5*time.Millisecond + rand.N(10*time.Millisecond)
	}
	return 250*time.Millisecond + rand.N(100*time.Millisecond)
}
