package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Chains in tools: three built-in jobs, each after the previous one and reading its output.
// Wordcount over the keyed corpus gives word → count; regroup by value gives count → words;
// regroup of all, summing count×words, gives the corpus's total words. The answer is checked
// against the corpus counted here.

// ChainStep is one job of a chain: its type and parameters, given the previous job's id.
type ChainStep struct {
	Type   string
	Params func(prev string) json.RawMessage
}

// ChainSteps is the chain over the keyed corpus; shardBytes sizes the map tasks of each step.
func ChainSteps(partitions int, shardBytes int64) []ChainStep {
	return []ChainStep{
		{Type: "wordcount", Params: func(string) json.RawMessage { return KeyedWordcountParams(partitions, shardBytes) }},
		{Type: "regroup", Params: func(prev string) json.RawMessage {
			return json.RawMessage(fmt.Sprintf(`{"job":%q,"by":"value","shard_bytes":%d}`, prev, shardBytes))
		}},
		{Type: "regroup", Params: func(prev string) json.RawMessage {
			return json.RawMessage(fmt.Sprintf(`{"job":%q,"by":"all","agg":"sum","of":"key*value","shard_bytes":%d}`, prev, max(shardBytes/8, 16)))
		}},
	}
}

// SubmitFunc submits a job of typ with params, after job after (none when "").
type SubmitFunc func(ctx context.Context, typ string, params json.RawMessage, after string) (string, error)

// ClientSubmit submits through c's Go client (client.WithAfter).
func ClientSubmit(c *cluster.Cluster) SubmitFunc {
	return func(ctx context.Context, typ string, params json.RawMessage, after string) (string, error) {
		var opts []client.SubmitOption
		if after != "" {
			opts = append(opts, client.WithAfter(after))
		}
		return c.Client.Submit(ctx, typ, params, opts...)
	}
}

// ChainRun is a chain run through leader kills.
type ChainRun struct {
	IDs   []string
	Kills []Kill
	// Elected is the election after each kill.
	Elected []cluster.Event
	// Notes says, per step, what the kill hit.
	Notes []string
}

// RunChain submits steps at once, each after the previous, and with kill, SIGKILLs the leader
// (restarted under its id) while each step runs, waiting for the next election each time.
func RunChain(ctx context.Context, c *cluster.Cluster, steps []ChainStep, submit SubmitFunc, kill bool, within time.Duration) (ChainRun, error) {
	var r ChainRun
	prev := ""
	for i, s := range steps {
		id, err := submit(ctx, s.Type, s.Params(prev), prev)
		if err != nil {
			return r, fmt.Errorf("submit step %d (%s): %w", i+1, s.Type, err)
		}
		r.IDs = append(r.IDs, id)
		prev = id
	}
	if !kill {
		return r, nil
	}
	for i, id := range r.IDs {
		st, err := waitRunning(ctx, c, id, within)
		if err != nil {
			return r, fmt.Errorf("step %d (%s): %w", i+1, id, err)
		}
		k, err := KillLeader(ctx, c, syscall.SIGKILL, true, nil)
		if err != nil {
			return r, err
		}
		r.Kills = append(r.Kills, k)
		ev, err := WaitElected(ctx, c, k.Epoch, within)
		if err != nil {
			return r, err
		}
		r.Elected = append(r.Elected, ev)
		r.Notes = append(r.Notes, fmt.Sprintf("step %d (%s) %s with %d of %d tasks: killed leader %s (epoch %d); %s elected (epoch %d) %.2f s later",
			i+1, id, st.State, st.ShardsDone, st.ShardsTotal, k.Worker, k.Epoch, ev.Worker, ev.Epoch, ev.Time.Sub(k.At).Seconds()))
	}
	return r, nil
}

// waitRunning waits until job id runs (planned, not ended).
func waitRunning(ctx context.Context, c *cluster.Cluster, id string, within time.Duration) (*client.Status, error) {
	until := time.Now().Add(within)
	var last *client.Status
	for {
		if st := Status(ctx, c, id); st != nil {
			last = st
			switch {
			case st.State == jobs.StateRunning:
				return st, nil
			case st.State.Terminal():
				return st, fmt.Errorf("ended before the leader was killed: %s", Describe(st))
			}
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return last, fmt.Errorf("not running within %v: %s", within, Describe(last))
		}
		_ = Sleep(ctx, 10*time.Millisecond)
	}
}

// CorpusWords counts the keyed corpus of c here (strings.Fields, as wordcount counts): its
// total words, and how many distinct words occur n times, for each n.
func CorpusWords(ctx context.Context, c *cluster.Cluster) (total int64, byCount map[int64]int64, err error) {
	data := store.New(c.Blob(), KeyedCorpusContainer)
	blobs, err := data.List(ctx, "in/")
	if err != nil {
		return 0, nil, err
	}
	counts := map[string]int64{}
	for _, b := range blobs {
		body, _, err := data.Get(ctx, b.Name)
		if err != nil {
			return 0, nil, err
		}
		for _, w := range strings.Fields(string(body)) {
			counts[w]++
			total++
		}
	}
	byCount = map[int64]int64{}
	for _, n := range counts {
		byCount[n]++
	}
	return total, byCount, nil
}

// ChainRecords reads a succeeded keyed job's output records: key text → value text.
func ChainRecords(ctx context.Context, c *cluster.Cluster, id string) (map[string]string, error) {
	res, err := c.Client.Result(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("result of %s: %w", id, err)
	}
	lines, err := KeyedOutput(ctx, c, res)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range lines {
		_, rec, _ := strings.Cut(l, " ")
		k, v, err := jobs.SplitRecord([]byte(rec))
		if err != nil {
			return nil, err
		}
		if _, dup := out[string(k)]; dup {
			return nil, fmt.Errorf("job %s: key %s twice in its output", id, k)
		}
		out[string(k)] = string(v)
	}
	return out, nil
}

// CheckChain waits for the chain's jobs to succeed and checks the last two outputs against the
// corpus: count → words exactly, and the total words. It returns the total.
func CheckChain(ctx context.Context, c *cluster.Cluster, ids []string, within time.Duration) (int64, error) {
	deadline := time.Now().Add(within)
	for _, id := range ids {
		st, ended := WaitEnd(ctx, c, id, deadline)
		if !ended || st.State != jobs.StateSucceeded {
			return 0, fmt.Errorf("job %s: %s", id, Describe(st))
		}
	}
	total, byCount, err := CorpusWords(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("count the corpus: %w", err)
	}
	hist, err := ChainRecords(ctx, c, ids[1])
	if err != nil {
		return 0, err
	}
	want := map[string]string{}
	for n, words := range byCount {
		want[strconv.FormatInt(n, 10)] = strconv.FormatInt(words, 10)
	}
	if !maps.Equal(hist, want) {
		keys := slices.Sorted(maps.Keys(want))
		return 0, fmt.Errorf("job %s (count → words): %d records, want %d; first want %s→%s, got %s", ids[1], len(hist), len(want), keys[0], want[keys[0]], hist[keys[0]])
	}
	last, err := ChainRecords(ctx, c, ids[2])
	if err != nil {
		return 0, err
	}
	if len(last) != 1 || last[`"all"`] != strconv.FormatInt(total, 10) {
		return 0, fmt.Errorf("job %s (total words): %v, want all→%d", ids[2], last, total)
	}
	return total, nil
}

// ChainLeftovers is what the chain's jobs left: Leftovers, and blobs of a keyed job besides its
// metadata and committed outputs (intermediates).
func ChainLeftovers(ctx context.Context, c *cluster.Cluster, ids []string) []string {
	left := Leftovers(ctx, c, ids)
	for _, id := range ids {
		res, err := c.Client.Result(ctx, id)
		if err != nil {
			return append(left, fmt.Sprintf("result of %s: %v", id, err))
		}
		more, err := KeyedLeftovers(ctx, c, id, res)
		if err != nil {
			return append(left, fmt.Sprintf("blobs of %s: %v", id, err))
		}
		left = append(left, more...)
	}
	return left
}

// A schedule that makes a chain per tick, watched through leader kills.

// AddChainFunc adds schedule name, making steps (their params given "$prev") every every.
type AddChainFunc func(ctx context.Context, name string, every time.Duration, steps []ChainStep) error

// ClientAddChain adds the schedule through c's Go client (ScheduleOptions.Then).
func ClientAddChain(c *cluster.Cluster) AddChainFunc {
	return func(ctx context.Context, name string, every time.Duration, steps []ChainStep) error {
		o := client.ScheduleOptions{Every: every, Type: steps[0].Type, Params: steps[0].Params(client.PrevJob),
			Overlap: "allow", CatchUp: time.Minute}
		for _, s := range steps[1:] {
			o.Then = append(o.Then, client.ChainStep{Type: s.Type, Params: s.Params(client.PrevJob)})
		}
		_, err := c.Client.AddSchedule(ctx, name, o)
		return err
	}
}

// ScheduleChainRun is a chain schedule's run: its ticks, what the kills hit, each chain's total.
type ScheduleChainRun struct {
	Notes  []string
	Ticks  int
	Totals []int64
}

// RunScheduleChain adds schedule name (a chain of steps every every), SIGKILLs the leader while
// a chain's step 2, then step 3 (and so on) runs, pauses it after ticks ticks and checks that
// every tick made its steps once each (ids from the tick's), none missing between the first
// and the last, and every chain is exact (CheckChain).
func RunScheduleChain(ctx context.Context, c *cluster.Cluster, name string, steps []ChainStep, add AddChainFunc, every time.Duration, ticks int, within time.Duration) (ScheduleChainRun, error) {
	var r ScheduleChainRun
	if err := add(ctx, name, every, steps); err != nil {
		return r, fmt.Errorf("add schedule %s: %w", name, err)
	}
	begin := time.Now()
	for k := 2; k <= len(steps); k++ {
		suffix := fmt.Sprintf("-%d", k)
		var running string
		for until := time.Now().Add(within); running == ""; {
			if page, err := c.Client.Query(ctx, client.Filter{State: jobs.StateRunning, Limit: 50}); err == nil {
				for _, st := range page.Jobs {
					if st.Schedule == name && strings.HasSuffix(st.ID, suffix) {
						running = st.ID
					}
				}
			}
			if running == "" && (time.Now().After(until) || ctx.Err() != nil) {
				return r, fmt.Errorf("no chain step %d of schedule %s running within %v", k, name, within)
			}
			_ = Sleep(ctx, 20*time.Millisecond)
		}
		kl, err := KillLeader(ctx, c, syscall.SIGKILL, true, nil)
		if err != nil {
			return r, err
		}
		ev, err := WaitElected(ctx, c, kl.Epoch, within)
		if err != nil {
			return r, err
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s running: killed leader %s (epoch %d); %s elected (epoch %d) %.2f s later",
			running, kl.Worker, kl.Epoch, ev.Worker, ev.Epoch, ev.Time.Sub(kl.At).Seconds()))
	}
	_ = Sleep(ctx, time.Until(begin.Add(time.Duration(ticks)*every)))
	if _, err := Retry(ctx, 30*time.Second, func() error { return c.Client.PauseSchedule(ctx, name) }); err != nil {
		return r, fmt.Errorf("pause schedule %s: %w", name, err)
	}
	_ = Sleep(ctx, 3*time.Second) // a tick fired as it was paused lands
	byTick, err := TickJobs(ctx, c, name)
	if err != nil {
		return r, err
	}
	sorted := slices.SortedFunc(maps.Keys(byTick), time.Time.Compare)
	r.Ticks = len(sorted)
	if len(sorted) < ticks-2 {
		return r, fmt.Errorf("%d ticks made jobs, want at least %d", len(sorted), ticks-2)
	}
	for i, tk := range sorted {
		if i > 0 && tk.Sub(sorted[i-1]) != every {
			return r, fmt.Errorf("ticks %s and %s are %v apart: a tick is missing", sorted[i-1].Format(time.TimeOnly), tk.Format(time.TimeOnly), tk.Sub(sorted[i-1]))
		}
		ids := byTick[tk]
		slices.Sort(ids)
		want := []string{ids[0]}
		for k := 2; k <= len(steps); k++ {
			want = append(want, fmt.Sprintf("%s-%d", ids[0], k))
		}
		if !slices.Equal(ids, want) {
			return r, fmt.Errorf("tick %s made %v, want %v once each", tk.Format(time.TimeOnly), ids, want)
		}
		total, err := CheckChain(ctx, c, ids, within)
		if err != nil {
			return r, fmt.Errorf("tick %s: %w", tk.Format(time.TimeOnly), err)
		}
		r.Totals = append(r.Totals, total)
	}
	return r, nil
}
