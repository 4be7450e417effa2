package election

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The probe path runs only on a silence of the heard term, only while healthy, only on the
// session the last beat arrived on, and at most once per ProbeAfter.
func TestWatch_ProbeDue(t *testing.T) {
	const after = 300 * time.Millisecond
	w := &watch{self: "me"}
	t0 := time.Now()
	if _, ok := w.probeDue(t0.Add(time.Hour), true, 0, after); ok {
		t.Fatal("probed before any beat was heard")
	}
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true}, t0, 7)
	if _, ok := w.probeDue(t0.Add(after-time.Millisecond), true, 7, after); ok {
		t.Error("probed before ProbeAfter of silence")
	}
	if _, ok := w.probeDue(t0.Add(after), false, 7, after); ok {
		t.Error("probed while unhealthy")
	}
	if _, ok := w.probeDue(t0.Add(after), true, 8, after); ok {
		t.Error("probed on a new session (this process reconnected since the beat)")
	}
	s, ok := w.probeDue(t0.Add(after), true, 7, after)
	if !ok || s.epoch != 3 || s.leader != "l" || s.beats != 1 {
		t.Fatalf("probeDue = %+v, %v; want epoch 3 of l", s, ok)
	}
	if _, ok := w.probeDue(t0.Add(after+after/2), true, 7, after); ok {
		t.Error("probed again within ProbeAfter")
	}
	if _, ok := w.probeDue(t0.Add(2*after), true, 7, after); !ok {
		t.Error("not probed again after ProbeAfter")
	}
	// A beat on the new session makes the probe path count again.
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 2, Answers: true}, t0.Add(3*after), 8)
	if _, ok := w.probeDue(t0.Add(4*after), true, 8, after); !ok {
		t.Error("not probed on the session of the last beat")
	}
	// A term whose beats do not say it answers (an older version's) is not probed.
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 3}, t0.Add(4*after), 8)
	if _, ok := w.probeDue(t0.Add(6*after), true, 8, after); ok {
		t.Error("probed a term that does not answer probes")
	}
	// A term adopted from the blob, never heard, is not probed: no beat says it answers.
	w.adopt(t0.Add(5*after), 9, "m")
	if _, ok := w.probeDue(t0.Add(7*after), true, 8, after); ok {
		t.Error("probed a term never heard")
	}
}

func TestConfig_ProbeSettings(t *testing.T) {
	base := testConfig("probecfg", "a")
	base.Heartbeats, base.Prober = (*port)(nil), nilProber{}
	c := base.withDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.ProbeAfter != c.HeartbeatInterval*6/5 || c.ProbeConfirm != 100*time.Millisecond {
		t.Errorf("defaults ProbeAfter %v, ProbeConfirm %v", c.ProbeAfter, c.ProbeConfirm)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.ProbeAfter = c.HeartbeatInterval }, "ProbeAfter"},
		{func(c *Config) { c.ProbeAfter = c.SuspicionTimeout }, "ProbeAfter"},
		{func(c *Config) { c.ProbeConfirm = 5 * time.Millisecond }, "ProbeConfirm"},
		{func(c *Config) { c.ProbeConfirm = c.SuspicionTimeout }, "ProbeConfirm"},
	} {
		c := base.withDefaults()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error about %s", err, tc.want)
		}
	}
}

// nilProber is a Prober for configuration checks.
type nilProber struct{}

func (nilProber) Answer(Term) (func(), error)         { return func() {}, nil }
func (nilProber) Probe(context.Context, uint64) error { return ErrNoResponders }
func (nilProber) Session() uint64                     { return 0 }
