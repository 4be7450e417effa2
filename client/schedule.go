package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// blobLister lists blobs by prefix (store.Container). The schedule and delete functions need it of
// Client.Store.
type blobLister interface {
	List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error)
}

// Schedule errors.
var (
	ErrNoSuchSchedule = errors.New("no such schedule")
	ErrScheduleExists = errors.New("schedule exists")
)

// ScheduleOptions describe a schedule to add. Give Every or Cron.
type ScheduleOptions struct {
	Every    time.Duration // whole seconds, at least 1s
	Cron     string        // "m h dom mon dow"
	TimeZone string        // IANA name for Cron; default UTC
	Type     string
	Params   json.RawMessage
	Overlap  string        // skip (default), queue or allow
	CatchUp  time.Duration // default 5m, at least 10s
	// Then makes each tick a chain: after the job of Type and Params, each step's job, after
	// the previous one; "$prev" in a step's params is the previous job's id.
	Then []ChainStep
}

// ChainStep is a later job of a schedule's chain: {"type": T, "params": {..."$prev"...}}.
type ChainStep struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params"`
}

func toProtocolSteps(steps []ChainStep) []protocol.ChainStep {
	var out []protocol.ChainStep
	for _, s := range steps {
		out = append(out, protocol.ChainStep{Type: s.Type, Params: s.Params})
	}
	return out
}

func fromProtocolSteps(steps []protocol.ChainStep) []ChainStep {
	var out []ChainStep
	for _, s := range steps {
		out = append(out, ChainStep{Type: s.Type, Params: s.Params})
	}
	return out
}

// PrevJob is the placeholder a chain step's params use for the previous step's job id.
const PrevJob = protocol.PrevJob

// ScheduleInfo is a schedule as `worker schedule list` shows it.
type ScheduleInfo struct {
	Name      string          `json:"name"`
	Every     string          `json:"every,omitempty"`
	Cron      string          `json:"cron,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
	Type      string          `json:"type"`
	Params    json.RawMessage `json:"params"`
	Overlap   string          `json:"overlap"`
	CatchUp   string          `json:"catch_up"`
	Paused    bool            `json:"paused"`
	CreatedAt time.Time       `json:"created_at"`
	LastTick  *time.Time      `json:"last_tick,omitempty"`
	LastJob   string          `json:"last_job,omitempty"`
	// NextTick is the next tick the leader fires (none while paused).
	NextTick *time.Time `json:"next_tick,omitempty"`
	Buffered *time.Time `json:"buffered,omitempty"`
	Fired    int64      `json:"fired"`
	Skipped  int64      `json:"skipped"`
	Missed   int64      `json:"missed"`
	// Then lists the chain's later steps (none for a schedule of one job).
	Then []ChainStep `json:"then,omitempty"`
}

func (c *Client) lister() (blobLister, error) {
	l, ok := c.Store.(blobLister)
	if !ok {
		return nil, errors.New("this client's store cannot list blobs")
	}
	return l, nil
}

// AddSchedule validates a schedule and its job (as Submit does) and stores it. The leader fires
// its first tick after now.
func (c *Client) AddSchedule(ctx context.Context, name string, o ScheduleOptions) (*ScheduleInfo, error) {
	if err := protocol.CheckScheduleName(name); err != nil {
		return nil, err
	}
	s := &protocol.Schedule{Name: name, UID: protocol.NewScheduleUID(), Cron: o.Cron, TimeZone: o.TimeZone,
		Type: o.Type, Params: o.Params, Overlap: o.Overlap, CreatedAt: c.now().UTC(), Then: toProtocolSteps(o.Then)}
	if o.Every != 0 {
		s.Every = o.Every.String()
	}
	if s.Overlap == "" {
		s.Overlap = protocol.OverlapSkip
	}
	s.CatchUp = protocol.DefaultCatchUp.String()
	if o.CatchUp != 0 {
		s.CatchUp = o.CatchUp.String()
	}
	if len(s.Params) == 0 {
		s.Params = json.RawMessage("{}")
	}
	data, err := s.Encode()
	if err != nil {
		return nil, err
	}
	if _, err := c.Validate(ctx, s.Type, s.Params); err != nil {
		return nil, err
	}
	if err := c.validateThen(ctx, s.Then); err != nil {
		return nil, err
	}
	if _, err := c.Store.Put(ctx, protocol.ScheduleBlob(name), data, store.Cond{IfNoneMatch: true}); err != nil {
		if errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("%w: %s (delete it first, or choose another name)", ErrScheduleExists, name)
		}
		return nil, fmt.Errorf("write schedule: %w", err)
	}
	info := infoOf(s)
	if n := s.Next(s.CreatedAt); !n.IsZero() {
		info.NextTick = &n
	}
	return info, nil
}

// infoOf is definition s as a ScheduleInfo, without its state.
func infoOf(s *protocol.Schedule) *ScheduleInfo {
	return &ScheduleInfo{Name: s.Name, Every: s.Every, Cron: s.Cron, TimeZone: s.TimeZone, Type: s.Type, Params: s.Params,
		Overlap: s.Overlap, CatchUp: s.CatchUp, Paused: s.Paused, CreatedAt: s.CreatedAt, Then: fromProtocolSteps(s.Then)}
}

// counts sets what the leader stored of the schedule: its last tick and job, its counts.
func (info *ScheduleInfo) counts(st *protocol.ScheduleState) {
	info.LastTick, info.LastJob, info.Buffered = st.LastTick, st.LastJob, st.Buffered
	info.Fired, info.Skipped, info.Missed = st.Fired, st.Skipped, st.Missed
}

// getSchedule reads schedule name and its ETag.
func (c *Client) getSchedule(ctx context.Context, name string) (*protocol.Schedule, store.ETag, error) {
	if err := protocol.CheckScheduleName(name); err != nil {
		return nil, "", err
	}
	data, etag, err := c.Store.Get(ctx, protocol.ScheduleBlob(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", fmt.Errorf("%w: %s (`schedule list` shows them)", ErrNoSuchSchedule, name)
	}
	if err != nil {
		return nil, "", err
	}
	s, err := protocol.ParseSchedule(data)
	if err != nil {
		return nil, "", err
	}
	return s, etag, nil
}

// Schedule returns one schedule with its last and next tick.
func (c *Client) Schedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	s, _, err := c.getSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	info := infoOf(s)
	since := s.CreatedAt
	data, _, err := c.Store.Get(ctx, protocol.ScheduleStateBlob(name))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		if st, err := protocol.ParseScheduleState(data); err == nil && st.UID == s.UID {
			info.counts(st)
			if st.LastTick != nil && st.LastTick.After(since) {
				since = *st.LastTick
			}
		}
	}
	if s.ResumedAt != nil && s.ResumedAt.After(since) {
		since = *s.ResumedAt
	}
	if !s.Paused {
		if n := s.Next(since); !n.IsZero() {
			info.NextTick = &n
		}
	}
	return info, nil
}

// Schedules returns every schedule, by name.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	l, err := c.lister()
	if err != nil {
		return nil, err
	}
	blobs, err := l.List(ctx, protocol.ScheduleDefsPrefix)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	var out []ScheduleInfo
	for _, b := range blobs {
		name := strings.TrimSuffix(strings.TrimPrefix(b.Name, protocol.ScheduleDefsPrefix), ".json")
		info, err := c.Schedule(ctx, name)
		if errors.Is(err, ErrNoSuchSchedule) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", protocol.Clip(name, 64), err)
		}
		out = append(out, *info)
	}
	return out, nil
}

// PauseSchedule stops a schedule's ticks; ResumeSchedule starts them again (the ticks while it
// was paused are not caught up).
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, true)
}

// ResumeSchedule: see PauseSchedule.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, false)
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool) error {
	for try := 0; try < 5; try++ {
		s, etag, err := c.getSchedule(ctx, name)
		if err != nil {
			return err
		}
		if s.Paused == paused {
			return nil
		}
		s.Paused = paused
		if !paused {
			now := c.now().UTC()
			s.ResumedAt = &now
		}
		data, err := s.Encode()
		if err != nil {
			return err
		}
		_, err = c.Store.Put(ctx, protocol.ScheduleBlob(name), data, store.Cond{IfMatch: etag})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("schedule %s kept changing; try again", name)
}

// DeleteSchedule removes a schedule, its state and its tick markers, and returns the schedule
// with its final counts. The jobs it made stay.
//
// The schedule is marked for deletion and the leader removes it: the call returns once the
// leader has, so no tick of the schedule makes a job after it returns. The leader counts the
// ticks due up to the mark that it had not handled as missed, so the counts returned add up to
// the schedule's due ticks through LastTick. With no leader to do it within deleteWait (or
// ctx's deadline), the client removes what is stored itself (the counts are then the last the
// leader stored); a marked schedule fires nothing in any later term.
func (c *Client) DeleteSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	if err := protocol.CheckScheduleName(name); err != nil {
		return nil, err
	}
	var def *protocol.Schedule
	for try := 0; ; try++ {
		data, etag, err := c.Store.Get(ctx, protocol.ScheduleBlob(name))
		if errors.Is(err, store.ErrNotFound) {
			if try == 0 {
				return nil, fmt.Errorf("%w: %s (`schedule list` shows them)", ErrNoSuchSchedule, name)
			}
			return c.finalInfo(ctx, name, def), nil // the leader removed it meanwhile
		}
		if err != nil {
			return nil, err
		}
		s, err := protocol.ParseSchedule(data)
		if err != nil || s.Deleting {
			def = s
			break // unreadable: removed below; marked: wait for the leader
		}
		at := c.now().UTC()
		s.Deleting, s.DeletingAt = true, &at
		if data, err = s.Encode(); err != nil {
			return nil, err
		}
		_, err = c.Store.Put(ctx, protocol.ScheduleBlob(name), data, store.Cond{IfMatch: etag})
		if err == nil {
			def = s
			break
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) || try == 5 {
			return nil, fmt.Errorf("mark schedule %s deleted: %w", name, err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, deleteWait)
	defer cancel()
	// Polled every 100 ms at first, then less often (up to 500 ms): 300 DELETEs at once polled
	// 160 times a second the storage the leader removes them from.
	for pause := 100 * time.Millisecond; ; pause = min(pause*3/2, 500*time.Millisecond) {
		ok, err := c.Store.Exists(wait, protocol.ScheduleBlob(name))
		if err == nil && !ok {
			return c.finalInfo(ctx, name, def), nil // the leader removed it
		}
		select {
		case <-wait.Done():
			info := c.finalInfo(ctx, name, def)
			return info, c.removeSchedule(ctx, name)
		case <-time.After(pause):
		}
	}
}

// finalInfo returns deleted schedule def (nil: unreadable) with the counts of its stored state
// (the final one the leader stored when it removed the schedule), and removes that state.
func (c *Client) finalInfo(ctx context.Context, name string, def *protocol.Schedule) *ScheduleInfo {
	info := &ScheduleInfo{Name: name}
	if def != nil {
		info = infoOf(def)
	}
	data, _, err := c.Store.Get(ctx, protocol.ScheduleStateBlob(name))
	if err != nil {
		return info
	}
	if st, err := protocol.ParseScheduleState(data); err == nil && (def == nil || st.UID == def.UID) {
		info.counts(st)
		if st.Final {
			// Taken: nothing of the schedule stays. (A leader removes one not taken, FinalKeep
			// after.) A schedule added again under the name meanwhile loses nothing by it:
			// its ticks' job ids and markers keep each to one job.
			_ = c.Store.Delete(ctx, protocol.ScheduleStateBlob(name))
		}
	}
	return info
}

// deleteWait is how long DeleteSchedule waits for the leader to remove a schedule.
const deleteWait = 15 * time.Second

// removeSchedule deletes what is stored of schedule name (no leader removed it).
func (c *Client) removeSchedule(ctx context.Context, name string) error {
	l, err := c.lister()
	if err != nil {
		return err
	}
	_ = c.Store.Delete(ctx, protocol.ScheduleStateBlob(name))
	if marks, err := l.List(ctx, protocol.ScheduleTicksOf(name)); err == nil {
		for _, m := range marks {
			_ = c.Store.Delete(ctx, m.Name)
		}
	}
	if err := c.Store.Delete(ctx, protocol.ScheduleBlob(name)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete schedule: %w", err)
	}
	return nil
}

// TriggerSchedule makes the schedule's job (and chain) now, whatever its ticks and overlap
// policy, and returns the first job's id. The jobs show the schedule and the time of the trigger
// as their tick.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (string, error) {
	s, _, err := c.getSchedule(ctx, name)
	if err != nil {
		return "", err
	}
	spec, err := c.validate(ctx, s.Type, s.Params, submitOptions{})
	if err != nil {
		return "", err
	}
	tick := c.now().UTC()
	spec.ID, spec.Schedule, spec.Tick = protocol.TickJobID(s.Name, s.UID+"/trigger", tick), s.Name, &tick
	first, err := c.submitSpec(ctx, spec)
	if err != nil {
		return "", err
	}
	prev := first
	for i, step := range s.Then {
		params, err := step.ParamsAfter(prev)
		if err != nil {
			return first, err
		}
		next, err := c.validate(ctx, step.Type, params, submitOptions{})
		if err != nil {
			return first, fmt.Errorf("chain step %d: %w", i+2, err)
		}
		next.ID, next.After, next.Schedule, next.Tick = protocol.ChainJobID(first, i+2), []string{prev}, s.Name, &tick
		if prev, err = c.submitSpec(ctx, next); err != nil {
			return first, fmt.Errorf("chain step %d: %w", i+2, err)
		}
	}
	return first, nil
}

// chainCheckID stands for the previous job while a chain step's params are validated.
const chainCheckID = "20000101-000000-00000000"

// validateThen validates each chain step as Submit would, its "$prev" standing for a job id.
func (c *Client) validateThen(ctx context.Context, then []protocol.ChainStep) error {
	for i, step := range then {
		params, err := step.ParamsAfter(chainCheckID)
		if err != nil {
			return err
		}
		if _, err := c.Validate(ctx, step.Type, params); err != nil {
			return fmt.Errorf("chain step %d: %w", i+2, err)
		}
	}
	return nil
}

// submitSpec writes a validated spec and queues its id (jobstore.Jobs.Submit).
func (c *Client) submitSpec(ctx context.Context, spec *protocol.Spec) (string, error) {
	if err := c.jobStore().Submit(ctx, spec); err != nil {
		return "", err
	}
	return spec.ID, nil
}
