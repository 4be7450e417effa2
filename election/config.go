package election

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"
)

// Azure's limits on a fixed-duration blob lease.
const (
	MinLeaseDuration = 15 * time.Second
	MaxLeaseDuration = 60 * time.Second
)

// Config configures an Elector. Zero fields take their defaults in New; Validate checks the
// values as given.
type Config struct {
	// Identity names this process in the lease blob's metadata and in logs, e.g. hostname-pid
	// (see DefaultIdentity). Required; printable ASCII, at most 256 characters.
	Identity string

	// Container holds the lease blob and nothing else. Default "leader".
	Container string

	// Blob is the lease blob's name. Default "lease".
	Blob string

	// LeaseDuration is the Azure lease duration, a whole number of seconds in 15s..60s.
	// Default 15s. After a crash, a new leader is elected within LeaseDuration + RetryInterval.
	LeaseDuration time.Duration

	// RenewInterval is the period between renewals. Default 1s (LeaseDuration/3 if shorter): a
	// renewal is also the leader's check that it reaches storage, and a leader whose renewal has
	// not succeeded for RenewStall pauses its heartbeats (see the package documentation). It
	// must leave room for at least one retry: RenewInterval*2 <= LeaseDuration - SafetyMargin.
	RenewInterval time.Duration

	// RetryInterval is the acquire period while following. Default 1s. Each wait is
	// RetryInterval*(1-Jitter*rand), so it never exceeds RetryInterval. Also the pause after a
	// term ends before campaigning again.
	RetryInterval time.Duration

	// Jitter in [0,1] spreads the followers' acquire attempts. Default 0.25 (0 means default).
	Jitter float64

	// SafetyMargin is taken off the lease: the leader's right to act ends at
	// (monotonic time the last successful renew was sent) + LeaseDuration - SafetyMargin.
	// It absorbs clock-rate differences and the time the caller needs to notice. Default 2s.
	SafetyMargin time.Duration

	// Heartbeats, when set, turns on fast crash takeover: the leader publishes a Beat every
	// HeartbeatInterval. A follower that hears none from the current term for SuspicionTimeout
	// breaks that term's lease (fenced by the ETag of its stamp) and campaigns at once. It does not
	// wait up to LeaseDuration for the lease to expire. Nil: no heartbeats, takeover after a crash
	// within LeaseDuration + RetryInterval.
	Heartbeats Heartbeats

	// HeartbeatInterval is the period of the leader's heartbeats. Default 250ms.
	HeartbeatInterval time.Duration

	// SuspicionTimeout is how long a follower, connected to the heartbeat transport the whole
	// time, must hear no heartbeat of the current term before it reads the lease blob and breaks
	// the lease of that term. It must be at least 4 heartbeat intervals (late beats under load
	// must not depose a live leader) and below LeaseDuration − SafetyMargin (otherwise the lease
	// expires first). Default 1.4s: with every core of a 2-core machine saturated, the latest
	// heartbeat measured was 1.03s late, p99 0.58s (see the package documentation), so the
	// longest gap was 1.28s; a paused or cut-off leader is then replaced within 1.5s.
	SuspicionTimeout time.Duration

	// Prober, when set with Heartbeats, turns on the fast path for process crashes: the leader's
	// term answers probes, the first successor probes it every WatchEvery, and any follower that
	// hears no beat of the term for ProbeAfter probes it; "no responders" on every probe over ProbeConfirm (at least 3 probes) means the
	// leader's connection is gone, and the follower breaks the lease as for a suspicion. Only
	// "no responders" counts, and only while this follower's own session is the one it last
	// heard the leader on (after its own reconnect the leader may be reconnecting too).
	Prober Prober

	// ProbeAfter is the silence of the current term after which a follower probes it. It must
	// be longer than HeartbeatInterval and below SuspicionTimeout. Default (0) 1.2 ×
	// HeartbeatInterval: 300ms with the default beats. Without a watcher (WatchEvery), the first
	// successor then takes over a crash after 50–300ms of silence plus ProbeConfirm plus the
	// break and acquire. Every other follower probes TurnStep later per place among the
	// successors (the unnamed after all of them): it acts only in its turn anyway.
	ProbeAfter time.Duration

	// ProbeConfirm is how long every probe must find no responders before a follower breaks
	// the lease. A live leader whose own connection drops while the server stays up reconnects
	// after the transport's reconnect wait: a ProbeConfirm below that deposes it (once, fenced).
	// From 10ms to SuspicionTimeout/2. Default (0) 100ms, at most SuspicionTimeout/4.
	ProbeConfirm time.Duration

	// WatchEvery is how often the term's first successor (the watcher, named in the beats) probes
	// the live term, with a Prober, without waiting for a missed beat. A crash is then seen within
	// WatchEvery instead of ProbeAfter, and confirmed as for a silence. One follower probes, so the
	// cost is constant in the cluster size (a request and its answer per WatchEvery). Default (0)
	// 50ms; negative turns watching off.
	WatchEvery time.Duration

	// Successors, when set with Heartbeats, names the followers that should take over first,
	// best first (e.g. the live members by id). The leader's beats carry the first
	// MaxSuccessors; after a crash or a release the first of them acts at once and each other
	// follower TurnStep later per place, so one request, not one per follower, reaches the lease
	// blob. It is called on every beat and must be quick.
	Successors func() []string

	// Healthy, when set, is called before every renewal. A non-nil error stops renewing, cancels
	// the leader context and releases the lease: use it to depose a coordinator whose main loop
	// is stuck. It runs on the renew goroutine; if it blocks, renewing stops and the safety
	// deadline ends the term.
	Healthy func() error

	// OnRelease, when set, is called after this process released the lease (graceful stop, lead
	// returned, Healthy failed, lead panicked). Announce the release (e.g. on NATS) so that
	// followers call Poke and take over at once instead of at their next retry.
	OnRelease func(Term)

	// OnEvent, when set, is called with every transition of this elector (elected, lost,
	// stepped down, released): the typed counterpart of its Info logs, for metrics, dashboards and
	// tests. It runs on the elector's goroutines and must return quickly without blocking.
	OnEvent func(Event)

	// Stamp is extra metadata written into the lease blob with every term this process wins
	// (e.g. the id of the key its messages are signed with), for observers (LeaderInfo.Stamp).
	// Keys are lower-case letters, digits and '_', not epoch, leader or since.
	Stamp map[string]string
	// Eligible, when set, is asked before every acquire attempt: while it returns an error this
	// process does not campaign (it logs the error once). Use it for a process that must not
	// lead, e.g. one misconfigured.
	Eligible func() error
	// Logger receives the elector's logs, with component=election. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults. Identity is left empty: set it (DefaultIdentity is a
// reasonable choice).
func DefaultConfig() Config {
	return Config{
		Container:     "leader",
		Blob:          "lease",
		LeaseDuration: 15 * time.Second,
		RenewInterval: time.Second,
		RetryInterval: time.Second,
		Jitter:        0.25,
		SafetyMargin:  2 * time.Second,

		HeartbeatInterval: 250 * time.Millisecond,
		SuspicionTimeout:  1400 * time.Millisecond,
	}
}

// DefaultIdentity returns "hostname-pid".
func DefaultIdentity() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// withDefaults sets every zero field to its default: the one place defaults are applied.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Container = cmp.Or(c.Container, d.Container)
	c.Blob = cmp.Or(c.Blob, d.Blob)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, d.LeaseDuration)
	// RenewInterval, ProbeAfter and ProbeConfirm default from other fields, so stay explicit.
	if c.RenewInterval == 0 {
		c.RenewInterval = min(d.RenewInterval, c.LeaseDuration/3)
	}
	c.RetryInterval = cmp.Or(c.RetryInterval, d.RetryInterval)
	c.Jitter = cmp.Or(c.Jitter, d.Jitter)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, d.SafetyMargin)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, d.HeartbeatInterval)
	c.SuspicionTimeout = cmp.Or(c.SuspicionTimeout, d.SuspicionTimeout)
	if c.ProbeAfter == 0 {
		c.ProbeAfter = c.HeartbeatInterval * 6 / 5
	}
	// Zero means the default; a negative WatchEvery (watching off) is kept.
	if c.WatchEvery == 0 {
		c.WatchEvery = 50 * time.Millisecond
	}
	if c.ProbeConfirm == 0 {
		c.ProbeConfirm = min(100*time.Millisecond, c.SuspicionTimeout/4)
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Validate refuses settings that cannot work, saying which field to change and how. It checks
// the values as given (New applies defaults to zero fields first).
func (c Config) Validate() error {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }

	switch {
	case c.Identity == "":
		add("Identity is empty: set it to a name unique to this process, e.g. hostname-pid")
	case len(c.Identity) > 256:
		add("Identity is %d characters long: use at most 256", len(c.Identity))
	case !printableASCII(c.Identity) || strings.TrimSpace(c.Identity) != c.Identity:
		add("Identity %q must be printable ASCII without leading or trailing spaces (it is stored in blob metadata)", c.Identity)
	}
	if msg := checkContainerName(c.Container); msg != "" {
		add("Container %q %s", c.Container, msg)
	}
	switch {
	case c.Blob == "":
		add("Blob is empty: name the lease blob, e.g. %q", "lease")
	case len(c.Blob) > 1024:
		add("Blob name is %d characters long: use at most 1024", len(c.Blob))
	}

	leaseOK := true
	switch {
	case c.LeaseDuration < MinLeaseDuration || c.LeaseDuration > MaxLeaseDuration:
		add("LeaseDuration %v is outside Azure's range: set it between %v and %v", c.LeaseDuration, MinLeaseDuration, MaxLeaseDuration)
		leaseOK = false
	case c.LeaseDuration%time.Second != 0:
		add("LeaseDuration %v is not a whole number of seconds: Azure leases are set in seconds", c.LeaseDuration)
	}
	marginOK := true
	switch {
	case c.SafetyMargin <= 0:
		add("SafetyMargin %v must be positive (default 2s)", c.SafetyMargin)
		marginOK = false
	case leaseOK && c.SafetyMargin >= c.LeaseDuration:
		add("SafetyMargin %v must be well below LeaseDuration %v", c.SafetyMargin, c.LeaseDuration)
		marginOK = false
	}
	switch {
	case c.RenewInterval <= 0:
		add("RenewInterval %v must be positive (default 1s)", c.RenewInterval)
	case leaseOK && marginOK && c.RenewInterval*2 > c.LeaseDuration-c.SafetyMargin:
		add("RenewInterval %v is not well inside the lease: need RenewInterval*2 <= LeaseDuration-SafetyMargin (%v); set RenewInterval to at most %v",
			c.RenewInterval, c.LeaseDuration-c.SafetyMargin, (c.LeaseDuration-c.SafetyMargin)/2)
	}
	switch {
	case c.RetryInterval < 10*time.Millisecond:
		add("RetryInterval %v is too short (it would hammer the storage account): use at least 10ms (default 1s)", c.RetryInterval)
	case c.RetryInterval > MaxLeaseDuration:
		add("RetryInterval %v is longer than any lease: use at most %v (default 1s)", c.RetryInterval, MaxLeaseDuration)
	}
	// The heartbeat settings matter only with a transport, or when set (a caller validates them
	// before it has connected one).
	if c.Heartbeats != nil || c.HeartbeatInterval != 0 || c.SuspicionTimeout != 0 {
		intervalOK := true
		switch {
		case c.HeartbeatInterval < 10*time.Millisecond:
			add("HeartbeatInterval %v is too short: use at least 10ms (default 250ms)", c.HeartbeatInterval)
			intervalOK = false
		case c.HeartbeatInterval > 10*time.Second:
			add("HeartbeatInterval %v is too long to speed up a takeover: use at most 10s (default 250ms)", c.HeartbeatInterval)
			intervalOK = false
		}
		switch {
		case intervalOK && c.SuspicionTimeout < 4*c.HeartbeatInterval:
			add("SuspicionTimeout %v is shorter than 4 heartbeat intervals (%v): a few late heartbeats would depose a live leader; set it to at least %v (default 1.4s)",
				c.SuspicionTimeout, 4*c.HeartbeatInterval, 4*c.HeartbeatInterval)
		case leaseOK && marginOK && c.SuspicionTimeout >= c.LeaseDuration-c.SafetyMargin:
			add("SuspicionTimeout %v is not below LeaseDuration-SafetyMargin (%v): the lease would expire before a follower suspects its holder; set it lower (default 1.4s)",
				c.SuspicionTimeout, c.LeaseDuration-c.SafetyMargin)
		}
	}
	// As for the heartbeats: checked with a transport, or when set.
	if c.Prober != nil || c.ProbeAfter != 0 {
		switch {
		case c.ProbeAfter <= c.HeartbeatInterval:
			add("ProbeAfter %v must be longer than HeartbeatInterval %v: probe only once a beat is missed (default 1.2 × HeartbeatInterval)", c.ProbeAfter, c.HeartbeatInterval)
		case c.ProbeAfter >= c.SuspicionTimeout:
			add("ProbeAfter %v must be below SuspicionTimeout %v, or the probe path never runs first (default 1.2 × HeartbeatInterval)", c.ProbeAfter, c.SuspicionTimeout)
		}
	}
	if c.WatchEvery > 0 && c.WatchEvery < 10*time.Millisecond {
		add("WatchEvery %v is too short: use at least 10ms, or a negative value to turn watching off (default 50ms)", c.WatchEvery)
	}
	if c.Prober != nil || c.ProbeConfirm != 0 {
		if c.ProbeConfirm < 10*time.Millisecond || c.ProbeConfirm > c.SuspicionTimeout/2 {
			add("ProbeConfirm %v must be between 10ms and half the SuspicionTimeout (%v) (default 100ms)", c.ProbeConfirm, c.SuspicionTimeout/2)
		}
	}
	for k, v := range c.Stamp {
		if !stampKey(k) || k == MetaEpoch || k == MetaLeader || k == MetaSince || k == MetaReleased {
			add("Stamp key %q: use lower-case letters, digits and '_' (not %s, %s, %s or %s)", k, MetaEpoch, MetaLeader, MetaSince, MetaReleased)
		} else if !printableASCII(v) || len(v) > 256 {
			add("Stamp %s: the value must be printable ASCII, at most 256 characters", k)
		}
	}
	if math.IsNaN(c.Jitter) || c.Jitter < 0 || c.Jitter > 1 {
		add("Jitter %v must be between 0 and 1 (default 0.25)", c.Jitter)
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(probs, "; "))
}

func stampKey(s string) bool {
	if s == "" || len(s) > 64 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkContainerName returns "" for a valid Azure container name, else what is wrong with it.
func checkContainerName(s string) string {
	if len(s) < 3 || len(s) > 63 {
		return "must be 3 to 63 characters long"
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9':
		case ch == '-':
			if i == 0 || i == len(s)-1 || s[i-1] == '-' {
				return "must start and end with a letter or digit and have no consecutive hyphens"
			}
		default:
			return "may hold only lower-case letters, digits and single hyphens"
		}
	}
	return ""
}
