// Package why says what a job that has not ended waits for: a predecessor, a worker with its
// type, the jobs queued before it, a larger share of higher-priority jobs, or its slowest task
// and the worker running it. One answer (Asker.Explain) serves `worker status JOB`, the HTTP API
// and the dashboard.
//
// The tasks running now come from the workers themselves: each keeps its running task attempts
// (Running) and answers a tasks request on NATS (Serve); Ask collects the answers for a short
// window. What is guaranteed: an answer is built from reads only and changes nothing. What is
// not: it is a snapshot, and a worker that does not answer within the window (or a forged
// answer: these replies carry no MAC, and only inform) is missing from it.
package why

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Subject is the core-NATS subject of tasks requests under a stream prefix.
func Subject(prefix string) string { return prefix + ".ctl.tasks" }

// Task is one running task attempt of a job on a worker.
type Task struct {
	Worker  string    `json:"worker"`
	Shard   int       `json:"shard"` // the shard, or a keyed job's task
	Attempt int       `json:"attempt"`
	Since   time.Time `json:"since"`
}

// Running is a worker's running task attempts. One map entry an attempt: a worker records
// every shard it runs, so Start and its done cost one map write each.
type Running struct {
	mu    sync.Mutex
	tasks map[runKey]runVal
	seq   uint64
}

type runKey struct {
	job            string
	shard, attempt int
}

// runVal is when an attempt started and which Start recorded it: a done of an earlier record
// of the same attempt (a duplicate delivery) leaves a later one.
type runVal struct {
	since time.Time
	seq   uint64
}

// Started is the record of one running attempt, which Done ends.
type Started struct {
	key runKey
	seq uint64
}

// Start records a task attempt as running until Done is called with what it returns.
func (r *Running) Start(job string, shard, attempt int) Started {
	key := runKey{job, shard, attempt}
	now := time.Now().UTC()
	r.mu.Lock()
	if r.tasks == nil {
		r.tasks = map[runKey]runVal{}
	}
	r.seq++
	seq := r.seq
	r.tasks[key] = runVal{now, seq}
	r.mu.Unlock()
	return Started{key, seq}
}

// Done ends the record s (more than once: no harm).
func (r *Running) Done(s Started) {
	r.mu.Lock()
	if v, ok := r.tasks[s.key]; ok && v.seq == s.seq {
		delete(r.tasks, s.key)
	}
	r.mu.Unlock()
}

// Of returns job's running task attempts on worker, oldest first.
func (r *Running) Of(job, worker string) []Task {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Task{}
	for k, v := range r.tasks {
		if k.job == job {
			out = append(out, Task{Worker: worker, Shard: k.shard, Attempt: k.attempt, Since: v.since})
		}
	}
	slices.SortFunc(out, func(a, b Task) int { return a.Since.Compare(b.Since) })
	return out
}

// request and reply are the wire forms of a tasks request and one worker's answer.
type request struct {
	Job string `json:"job"`
}

type reply struct {
	Worker string   `json:"worker"`
	Types  []string `json:"types"`
	Tasks  []Task   `json:"tasks"`
}

// maxReplyTasks bounds the tasks one reply carries (the oldest: the slowest are first).
const maxReplyTasks = 256

// decodeReply reads one worker's answer, refusing what no worker sends.
func decodeReply(data []byte) (*reply, error) {
	var r reply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("tasks reply: %w", err)
	}
	switch {
	case r.Worker == "" || len(r.Worker) > 128:
		return nil, errors.New("tasks reply: no worker id, or one over 128 bytes")
	case len(r.Tasks) > maxReplyTasks || len(r.Types) > 1024:
		return nil, fmt.Errorf("tasks reply: %d tasks and %d types, at most %d and 1024", len(r.Tasks), len(r.Types), maxReplyTasks)
	}
	for _, t := range r.Tasks {
		if t.Shard < 0 || t.Attempt < 0 || t.Since.IsZero() {
			return nil, errors.New("tasks reply: a task with a negative shard or attempt, or no start")
		}
	}
	return &r, nil
}

// Serve answers tasks requests on nc for worker (of job types types) from r, until the
// subscription is unsubscribed.
func Serve(nc *nats.Conn, subject, worker string, types []string, r *Running) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var req request
		if m.Reply == "" || json.Unmarshal(m.Data, &req) != nil || protocol.CheckID(req.Job) != nil {
			return
		}
		tasks := r.Of(req.Job, worker)
		if len(tasks) > maxReplyTasks {
			tasks = tasks[:maxReplyTasks]
		}
		data, err := json.Marshal(reply{Worker: worker, Types: types, Tasks: tasks})
		if err == nil {
			_ = m.Respond(data)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	return sub, nil
}

// Workers is what Ask heard: each answering worker's types, and job's running tasks.
type Workers struct {
	Types map[string][]string // worker → its job types
	Tasks []Task              // oldest first
}

// quietGap ends the collection early: the workers answer together, so once answers have come
// and none follows for this long, the rest are not waited for.
const quietGap = 60 * time.Millisecond

// Ask asks every worker for job's running tasks and collects the answers within window (less
// once answers stop coming: quietGap).
func Ask(ctx context.Context, nc *nats.Conn, subject, job string, window time.Duration) (*Workers, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("ask the workers for job %s's tasks: %w", job, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	data, _ := json.Marshal(request{Job: job})
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		return nil, fmt.Errorf("ask the workers for job %s's tasks: %w", job, err)
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	out := &Workers{Types: map[string][]string{}, Tasks: []Task{}}
	for {
		nctx, ncancel := wctx, context.CancelFunc(func() {})
		if len(out.Types) > 0 {
			nctx, ncancel = context.WithTimeout(wctx, quietGap)
		}
		m, err := sub.NextMsgWithContext(nctx)
		ncancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break // the window is over, or the answers stopped
		}
		rep, err := decodeReply(m.Data)
		if err != nil {
			continue
		}
		if _, seen := out.Types[rep.Worker]; seen {
			continue
		}
		out.Types[rep.Worker] = rep.Types
		for _, t := range rep.Tasks {
			t.Worker = rep.Worker
			out.Tasks = append(out.Tasks, t)
		}
	}
	slices.SortFunc(out.Tasks, func(a, b Task) int { return a.Since.Compare(b.Since) })
	return out, nil
}

// Reason is one thing a job waits for.
type Reason struct {
	// Kind: "predecessor", "type", "queue", "priority", "slow_task", "no_task", "no_worker".
	Kind string `json:"kind"`
	Text string `json:"text"`
	Job  string `json:"job,omitempty"`  // the predecessor, or the job of higher priority
	Task *Task  `json:"task,omitempty"` // slow_task: the slowest running task
}

// Answer is why a job waits: nothing for a job that ended.
type Answer struct {
	Job     string     `json:"job"`
	State   jobs.State `json:"state"`
	Reasons []Reason   `json:"reasons"`
	// Tasks are the job's running task attempts the workers reported, oldest first (at most 20).
	Tasks []Task    `json:"tasks,omitempty"`
	At    time.Time `json:"at"`
}

// Jobs reads jobs (client.Client does).
type Jobs interface {
	Status(ctx context.Context, id string) (*client.Status, error)
	Query(ctx context.Context, f client.Filter) (*client.Page, error)
}

// Asker builds answers.
type Asker struct {
	Jobs Jobs
	// Conn and Subject reach the workers; nil Conn: no worker is asked (no types or tasks).
	Conn    *nats.Conn
	Subject string
	Window  time.Duration // how long answers are collected; default 300ms
	Now     func() time.Time
}

// Explain says why job id waits. A job that ended waits for nothing.
func (a *Asker) Explain(ctx context.Context, id string) (*Answer, error) {
	st, err := a.Jobs.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	ans := &Answer{Job: id, State: st.State, Reasons: []Reason{}, At: now.UTC()}
	if st.State.Terminal() || (st.State != jobs.StateQueued && st.State != jobs.StateWaiting && st.State != jobs.StateRunning) {
		return ans, nil
	}
	var ws *Workers
	var askErr error
	if a.Conn != nil && st.State != jobs.StateWaiting {
		ws, askErr = Ask(ctx, a.Conn, a.Subject, id, cmp.Or(a.Window, 300*time.Millisecond))
	}
	switch st.State {
	case jobs.StateWaiting:
		ans.Reasons = a.waiting(ctx, st)
	case jobs.StateQueued:
		ans.Reasons = append(typeReasons(st, ws), a.queued(ctx, st)...)
	case jobs.StateRunning:
		rs, err := a.running(ctx, st)
		if err != nil {
			return nil, err
		}
		ans.Reasons = append(rs, taskReasons(st, ws, now)...)
		if ws != nil {
			ans.Tasks = ws.Tasks[:min(len(ws.Tasks), 20)]
		}
	}
	if askErr != nil {
		ans.Reasons = append(ans.Reasons, Reason{Kind: "no_worker", Text: "the workers could not be asked: " + protocol.Redact(askErr.Error())})
	}
	return ans, nil
}

// waiting explains a waiting job: its predecessors not yet succeeded, or the leader's reason
// (no leader with its type).
func (a *Asker) waiting(ctx context.Context, st *client.Status) []Reason {
	var out []Reason
	for _, p := range st.After {
		ps, err := a.Jobs.Status(ctx, p)
		switch {
		case errors.Is(err, client.ErrNoSuchJob):
			out = append(out, Reason{Kind: "predecessor", Job: p, Text: "predecessor " + p + " no longer exists"})
		case err != nil:
			out = append(out, Reason{Kind: "predecessor", Job: p, Text: "predecessor " + p + ": cannot read it: " + protocol.Redact(err.Error())})
		case ps.State != jobs.StateSucceeded:
			out = append(out, Reason{Kind: "predecessor", Job: p, Text: "waits for job " + p + " (" + progress(ps) + ")"})
		}
	}
	if len(out) == 0 && st.Error != "" {
		out = append(out, Reason{Kind: "type", Text: st.Error})
	}
	return out
}

// progress is a job's state and how far it is, e.g. "running, 40 of 100 shards".
func progress(st *client.Status) string {
	if st.ShardsTotal == 0 {
		return string(st.State)
	}
	return fmt.Sprintf("%s, %d of %d shards", st.State, st.ShardsDone, st.ShardsTotal)
}

// typeReasons says when no answering worker has the job's type.
func typeReasons(st *client.Status, ws *Workers) []Reason {
	if ws == nil || st.Type == "" {
		return nil
	}
	if len(ws.Types) == 0 {
		return []Reason{{Kind: "no_worker", Text: "no worker answered: is any running? (worker workers)"}}
	}
	var known []string
	for _, ts := range ws.Types {
		if slices.Contains(ts, st.Type) {
			return nil
		}
		known = append(known, ts...)
	}
	slices.Sort(known)
	return []Reason{{Kind: "type", Text: fmt.Sprintf("no running worker has type %q (they have: %s): start one that has it",
		st.Type, strings.Join(slices.Compact(known), ", "))}}
}

// queued says how many jobs were queued before it.
func (a *Asker) queued(ctx context.Context, st *client.Status) []Reason {
	// Only ids before its own are read: ids sort by submission time.
	page, err := a.Jobs.Query(ctx, client.Filter{State: jobs.StateQueued, Before: st.ID, Limit: client.MaxQueryLimit})
	if err != nil {
		return []Reason{{Kind: "queue", Text: "queued; the queue cannot be read now: " + protocol.Redact(err.Error())}}
	}
	ahead := 0
	oldest := ""
	for _, j := range page.Jobs {
		if j.ID < st.ID {
			ahead++
			oldest = j.ID // newest first: the last is the oldest
		}
	}
	if ahead == 0 {
		return []Reason{{Kind: "queue", Text: "queued, next for intake: the leader takes it at its next queue poll (is there a leader? worker status)"}}
	}
	more := ""
	if page.Next != "" {
		more = " or more"
	}
	return []Reason{{Kind: "queue", Job: oldest, Text: fmt.Sprintf("queued behind %d%s job(s) submitted before it (the oldest %s)", ahead, more, oldest)}}
}

// running says what shares the workers with it: running jobs of its type of higher priority.
func (a *Asker) running(ctx context.Context, st *client.Status) ([]Reason, error) {
	page, err := a.Jobs.Query(ctx, client.Filter{State: jobs.StateRunning, Type: st.Type, Limit: client.MaxQueryLimit})
	if err != nil {
		return nil, err
	}
	weight := func(p int) float64 { return math.Pow(2, float64(p)) }
	total := weight(st.Priority)
	var higher []client.Status
	others := 0
	for _, j := range page.Jobs {
		if j.ID == st.ID {
			continue
		}
		others++
		total += weight(j.Priority)
		if j.Priority > st.Priority {
			higher = append(higher, j)
		}
	}
	if others == 0 {
		return nil, nil
	}
	share := weight(st.Priority) / total
	text := fmt.Sprintf("its share of type %s's workers is %.0f %% (priority %d), with %d other running job(s) of the type", st.Type, 100*share, st.Priority, others)
	r := Reason{Kind: "priority", Text: text}
	if len(higher) > 0 {
		slices.SortFunc(higher, func(a, b client.Status) int { return b.Priority - a.Priority })
		var names []string
		for _, h := range higher[:min(len(higher), 5)] {
			names = append(names, fmt.Sprintf("%s (priority %d)", h.ID, h.Priority))
		}
		r.Text += ", behind higher priorities: " + strings.Join(names, ", ")
		r.Job = higher[0].ID
	}
	return []Reason{r}, nil
}

// taskReasons names the slowest running task and its worker, or says none runs.
func taskReasons(st *client.Status, ws *Workers, now time.Time) []Reason {
	if ws == nil {
		return nil
	}
	if len(ws.Types) == 0 {
		return []Reason{{Kind: "no_worker", Text: "no worker answered: is any running? (worker workers)"}}
	}
	if len(ws.Tasks) == 0 {
		if st.ShardsTotal > 0 && st.ShardsDone >= st.ShardsTotal {
			return []Reason{{Kind: "no_task", Text: "every shard is done: the leader is merging or checkpointing its end"}}
		}
		return []Reason{{Kind: "no_task", Text: fmt.Sprintf("no task of it runs now (%s): its shards wait for a free worker, behind other jobs' shards", progress(st))}}
	}
	slow := ws.Tasks[0]
	ages := make([]time.Duration, len(ws.Tasks))
	for i, t := range ws.Tasks {
		ages[i] = now.Sub(t.Since)
	}
	slices.Sort(ages)
	text := fmt.Sprintf("slowest task: shard %d attempt %d on %s, running %s", slow.Shard, slow.Attempt, slow.Worker, round(now.Sub(slow.Since)))
	if len(ages) > 1 {
		text += fmt.Sprintf(" (%d running; their median %s)", len(ages), round(ages[len(ages)/2]))
	}
	return []Reason{{Kind: "slow_task", Text: text, Task: &slow}}
}

func round(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
