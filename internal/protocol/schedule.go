package protocol

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // --time-zone works on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/mapagg/mapagg/jobs"
)

// Schedules in the jobs container. The CLI writes a schedule's definition; the leader writes its
// state and one marker per tick it claims.
//
//	schedules/defs/<name>.json                  the Schedule (If-None-Match; pause and resume If-Match)
//	schedules/state/<name>.json                 the ScheduleState (leader only, If-Match, fenced)
//	schedules/ticks/<name>/<uid>/<tick>         a TickMarker (If-None-Match: one claim per tick)
const (
	ScheduleDefsPrefix  = "schedules/defs/"
	ScheduleStatePrefix = "schedules/state/"
	ScheduleTicksPrefix = "schedules/ticks/"
)

func ScheduleBlob(name string) string      { return ScheduleDefsPrefix + name + ".json" }
func ScheduleStateBlob(name string) string { return ScheduleStatePrefix + name + ".json" }

// FinalKeep is how long a deleted schedule's final state (ScheduleState.Final) waits for its
// DELETE to read it before a leader removes it.
const FinalKeep = time.Minute

// ScheduleTicksOf is the prefix of every tick marker of schedule name, of any generation.
func ScheduleTicksOf(name string) string { return ScheduleTicksPrefix + name + "/" }

// TickBlob names the marker of tick of generation uid of schedule name.
func TickBlob(name, uid string, tick time.Time) string {
	return ScheduleTicksOf(name) + uid + "/" + tick.UTC().Format(tickLayout)
}

const tickLayout = "20060102T150405Z"

// Overlap policies: what a tick does while the schedule's previous job still runs.
const (
	OverlapSkip  = "skip"  // the tick makes no job
	OverlapQueue = "queue" // the tick waits for the previous job (at most one waits; later ones skip)
	OverlapAllow = "allow" // the tick makes its job anyway
)

// Schedule limits and defaults.
const (
	MinEvery       = time.Second
	MinCatchUp     = 10 * time.Second
	DefaultCatchUp = 5 * time.Minute
	MaxScheduleLen = 48
)

// ErrBadSchedule is matched by every error about a malformed schedule.
var ErrBadSchedule = errors.New("bad schedule")

// Schedule is a recurring job: a job of Type with Params, made once per tick.
type Schedule struct {
	Name string `json:"name"`
	// UID tells this schedule from an earlier one of the same name: state and ticks are its own.
	UID      string          `json:"uid"`
	Every    string          `json:"every,omitempty"` // a Go duration, whole seconds
	Cron     string          `json:"cron,omitempty"`  // "m h dom mon dow"
	TimeZone string          `json:"time_zone,omitempty"`
	Type     string          `json:"type"`
	Params   json.RawMessage `json:"params"`
	Overlap  string          `json:"overlap"`
	CatchUp  string          `json:"catch_up"` // a Go duration
	Paused   bool            `json:"paused,omitempty"`
	// Deleting: a DELETE asked the leader to remove the schedule, at DeletingAt; it fires
	// nothing more, stores the final state (the ticks due up to DeletingAt and not yet handled
	// counted missed), removes the tick markers, then this definition (the DELETE's
	// acknowledgement). The DELETE reads the final state and removes it.
	Deleting   bool       `json:"deleting,omitempty"`
	DeletingAt *time.Time `json:"deleting_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	// ResumedAt: ticks up to it were paused, and are not caught up.
	ResumedAt *time.Time `json:"resumed_at,omitempty"`
	// Then makes each tick a chain: these jobs follow the tick's job, each after the previous
	// (chain.go).
	Then []ChainStep `json:"then,omitempty"`

	sched cron.Schedule
	every time.Duration
	catch time.Duration
	loc   *time.Location
}

// NewScheduleUID returns a fresh generation id.
func NewScheduleUID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CheckScheduleName reports whether name can name a schedule: 1–48 of a-z, 0-9 and '-', not
// starting with '-'. Names become blob names.
func CheckScheduleName(name string) error {
	if name == "" || len(name) > MaxScheduleLen {
		return fmt.Errorf("%w: name %q must be 1 to %d characters", ErrBadSchedule, Clip(name, 64), MaxScheduleLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return fmt.Errorf("%w: name %q: only a-z, 0-9 and '-' (not first) are allowed", ErrBadSchedule, Clip(name, 64))
		}
	}
	return nil
}

// Check validates s and prepares it for Next. Every field is checked; the first problem is
// returned, saying what to change.
func (s *Schedule) Check() error {
	if err := CheckScheduleName(s.Name); err != nil {
		return err
	}
	if s.UID == "" || len(s.UID) > 32 {
		return fmt.Errorf("%w: uid must be 1 to 32 characters", ErrBadSchedule)
	}
	if s.Type == "" {
		return fmt.Errorf("%w: no job type", ErrBadSchedule)
	}
	if len(s.Params) == 0 || !json.Valid(s.Params) {
		return fmt.Errorf("%w: params must be a JSON value", ErrBadSchedule)
	}
	if err := checkThen(s.Then); err != nil {
		return err
	}
	s.loc = time.UTC
	if s.TimeZone != "" {
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil || strings.HasPrefix(s.TimeZone, "/") || strings.Contains(s.TimeZone, "..") {
			return fmt.Errorf("%w: unknown time zone %q: use an IANA name such as Europe/Berlin or UTC", ErrBadSchedule, Clip(s.TimeZone, 64))
		}
		s.loc = loc
	}
	switch {
	case s.Every != "" && s.Cron != "":
		return fmt.Errorf("%w: give --every or --cron, not both", ErrBadSchedule)
	case s.Every == "" && s.Cron == "":
		return fmt.Errorf("%w: give --every DURATION or --cron \"m h dom mon dow\"", ErrBadSchedule)
	case s.Every != "":
		d, err := time.ParseDuration(s.Every)
		if err != nil {
			return fmt.Errorf("%w: --every %q: %v", ErrBadSchedule, Clip(s.Every, 64), err)
		}
		if d < MinEvery || d%time.Second != 0 {
			return fmt.Errorf("%w: --every %s: use a whole number of seconds, at least %v", ErrBadSchedule, d, MinEvery)
		}
		s.every = d
	default:
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(s.Cron), "TZ=") {
			return fmt.Errorf("%w: --cron %q: give the time zone with --time-zone", ErrBadSchedule, Clip(s.Cron, 64))
		}
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "@every") {
			return fmt.Errorf("%w: --cron %q: use --every for intervals", ErrBadSchedule, Clip(s.Cron, 64))
		}
		sc, err := cron.ParseStandard(s.Cron)
		if err != nil {
			return fmt.Errorf("%w: --cron %q: %v (five fields: minute hour day-of-month month day-of-week)", ErrBadSchedule, Clip(s.Cron, 64), err)
		}
		s.sched = sc
	}
	switch s.Overlap {
	case OverlapSkip, OverlapQueue, OverlapAllow:
	default:
		return fmt.Errorf("%w: overlap %q: use skip, queue or allow", ErrBadSchedule, Clip(s.Overlap, 32))
	}
	c, err := time.ParseDuration(s.CatchUp)
	if err != nil {
		return fmt.Errorf("%w: --catch-up %q: %v", ErrBadSchedule, Clip(s.CatchUp, 64), err)
	}
	if c < MinCatchUp {
		return fmt.Errorf("%w: --catch-up %v: at least %v (a tick is fired late by up to a few seconds)", ErrBadSchedule, c, MinCatchUp)
	}
	s.catch = c
	return nil
}

// CatchUpWindow is how late a missed tick may still fire (valid after Check).
func (s *Schedule) CatchUpWindow() time.Duration { return s.catch }

// Next returns the first tick strictly after t (valid after Check). Ticks are whole seconds:
// --every ticks are multiples of the interval since the Unix epoch; --cron ticks follow the
// schedule's time zone. A cron that never fires returns the zero time.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		sec := int64(s.every / time.Second)
		u := t.Unix()
		if u < 0 {
			return time.Time{}
		}
		return time.Unix((u/sec+1)*sec, 0).UTC()
	}
	if s.sched == nil {
		return time.Time{}
	}
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Encode returns the schedule's JSON (checked first).
func (s *Schedule) Encode() ([]byte, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSchedule, err)
	}
	if len(b) > jobs.MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, the limit is %d", ErrBadSchedule, len(b), jobs.MaxSpecBytes)
	}
	return b, nil
}

// ParseSchedule decodes a schedule read from storage and checks it.
func ParseSchedule(data []byte) (*Schedule, error) {
	var s Schedule
	if err := decodeStrict(data, &s, ErrBadSchedule); err != nil {
		return nil, err
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// ScheduleState is what the leader keeps of a schedule: the ticks handled, the last job.
type ScheduleState struct {
	Name string `json:"name"`
	UID  string `json:"uid"` // the generation it belongs to: another's is ignored
	// LastTick is the last tick handled (fired, skipped or buffered); the next tick is after it.
	LastTick *time.Time `json:"last_tick,omitempty"`
	LastJob  string     `json:"last_job,omitempty"`
	// Buffered is a tick that waits for the previous job (overlap queue).
	Buffered *time.Time `json:"buffered,omitempty"`
	Fired    int64      `json:"fired"`
	Skipped  int64      `json:"skipped"` // overlap
	Missed   int64      `json:"missed"`  // older than the catch-up window when a leader got to them, or left behind by a leader that fell behind (its schedule's next tick was due first)
	// Final: the schedule was deleted; the counts are its last, through LastTick, for its DELETE
	// to read (and remove). A leader removes one left a minute (FinalKeep) after.
	Final bool `json:"final,omitempty"`
	// WriterEpoch and WriterTerm name the term that wrote it (fencing, as checkpoints).
	WriterEpoch uint64    `json:"writer_epoch"`
	WriterTerm  string    `json:"writer_term"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Encode returns the state's JSON.
func (s *ScheduleState) Encode() ([]byte, error) { return json.Marshal(s) }

// ParseScheduleState decodes a schedule's state.
func ParseScheduleState(data []byte) (*ScheduleState, error) {
	var s ScheduleState
	if err := decodeStrict(data, &s, ErrBadSchedule); err != nil {
		return nil, err
	}
	if err := CheckScheduleName(s.Name); err != nil {
		return nil, err
	}
	return &s, nil
}

// TickMarker claims one tick of a schedule for the term that wrote it.
type TickMarker struct {
	Schedule string    `json:"schedule"`
	UID      string    `json:"uid"`
	Tick     time.Time `json:"tick"`
	Job      string    `json:"job,omitempty"` // empty when the tick was skipped
	Epoch    uint64    `json:"epoch"`
	Term     string    `json:"term"`
}

// Encode returns the marker's JSON.
func (m *TickMarker) Encode() ([]byte, error) { return json.Marshal(m) }

// ParseTickMarker decodes a tick marker.
func ParseTickMarker(data []byte) (*TickMarker, error) {
	var m TickMarker
	if err := decodeStrict(data, &m, ErrBadSchedule); err != nil {
		return nil, err
	}
	return &m, nil
}

// TickJobID is the id of the job tick of schedule name (generation uid) makes: the same for
// every leader, so a tick fired twice writes one spec (If-None-Match). It sorts by tick time.
func TickJobID(name, uid string, tick time.Time) string {
	h := sha256.Sum256([]byte(name + "\x00" + uid + "\x00" + tick.UTC().Format(time.RFC3339Nano)))
	return tick.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(h[:6])
}

func decodeStrict(data []byte, v any, sentinel error) error {
	if len(data) > jobs.MaxSpecBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d", sentinel, len(data), jobs.MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", sentinel, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", sentinel)
	}
	return nil
}

// RetryJobID is the id of the automatic retry of job id: id with "-r1" added, or its "-rN"
// raised to N+1. The same for every leader, so a retry is made once (its spec If-None-Match).
// Attempt is N+1.
func RetryJobID(id string) (next string, attempt int) {
	base, n := id, 0
	if i := strings.LastIndex(id, "-r"); i > 0 {
		if k, err := strconv.Atoi(id[i+2:]); err == nil && k > 0 && strconv.Itoa(k) == id[i+2:] {
			base, n = id[:i], k
		}
	}
	next = base + "-r" + strconv.Itoa(n+1)
	if len(next) > 64 {
		h := sha256.Sum256([]byte(id))
		next = "r-" + hex.EncodeToString(h[:12])
	}
	return next, n + 1
}
