package why

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

// fakeJobs serves statuses from a map (the explaining is pure logic over them).
type fakeJobs map[string]client.Status

func (f fakeJobs) Status(_ context.Context, id string) (*client.Status, error) {
	st, ok := f[id]
	if !ok {
		return nil, client.ErrNoSuchJob
	}
	return &st, nil
}

func (f fakeJobs) Query(_ context.Context, flt client.Filter) (*client.Page, error) {
	p := &client.Page{}
	for _, st := range f {
		if (flt.State == "" || st.State == flt.State) && (flt.Type == "" || st.Type == flt.Type) {
			p.Jobs = append(p.Jobs, st)
		}
	}
	return p, nil
}

func TestRunning_StartAndDone(t *testing.T) {
	var r Running
	s1 := r.Start("j", 3, 1)
	time.Sleep(time.Millisecond)
	s2 := r.Start("j", 4, 2)
	if got := r.Of("j", "w1"); len(got) != 2 || got[0].Shard != 3 || got[1].Attempt != 2 || got[0].Worker != "w1" {
		t.Fatalf("running %+v; want shard 3 then shard 4 attempt 2", got)
	}
	r.Done(s1)
	r.Done(s1)                  // twice: no harm
	again := r.Start("j", 4, 2) // the same attempt delivered twice: the first's end keeps the second
	r.Done(s2)
	if got := r.Of("j", "w1"); len(got) != 1 || got[0].Shard != 4 {
		t.Fatalf("after the first of a duplicate ended: %+v; want shard 4 still running", got)
	}
	r.Done(again)
	if got := r.Of("j", "w1"); len(got) != 0 || len(r.tasks) != 0 {
		t.Fatalf("after all ended: %+v (%d tasks kept)", got, len(r.tasks))
	}
}

// Workers answer a tasks request with their types and the job's running tasks; Ask collects
// both, the slowest task first. The answer names the slowest task and its worker.
func TestAsk_SlowestTaskAndItsWorker(t *testing.T) {
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const job = "20261129-120000-0123abcd"
	subj := Subject("whytest")
	var r1, r2 Running
	r2.Start(job, 7, 2) // the slowest: started first
	time.Sleep(20 * time.Millisecond)
	r1.Start(job, 1, 1)
	r1.Start("20261129-120000-0000ffff", 0, 1) // another job's
	for _, w := range []struct {
		id string
		r  *Running
	}{{"w1", &r1}, {"w2", &r2}} {
		sub, err := Serve(nc, subj, w.id, []string{"pi", "sleep"}, w.r)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	ws, err := Ask(context.Background(), nc, subj, job, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws.Types) != 2 || len(ws.Tasks) != 2 || ws.Tasks[0].Worker != "w2" || ws.Tasks[0].Shard != 7 || ws.Tasks[1].Worker != "w1" {
		t.Fatalf("asked: %+v", ws)
	}

	a := &Asker{Conn: nc, Subject: subj, Jobs: fakeJobs{
		job:                        {ID: job, Type: "sleep", State: jobs.StateRunning, ShardsTotal: 10, ShardsDone: 8},
		"20261129-115900-0000aaaa": {ID: "20261129-115900-0000aaaa", Type: "sleep", State: jobs.StateRunning, Priority: 3},
		"20261129-115800-0000bbbb": {ID: "20261129-115800-0000bbbb", Type: "pi", State: jobs.StateRunning, Priority: 9},
	}}
	ans, err := a.Explain(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	text := texts(ans)
	for _, want := range []string{
		"its share of type sleep's workers is 11 % (priority 0), with 1 other running job(s) of the type, behind higher priorities: 20261129-115900-0000aaaa (priority 3)",
		"slowest task: shard 7 attempt 2 on w2, running",
		"(2 running; their median",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("answer lacks %q:\n%s", want, text)
		}
	}
	if len(ans.Tasks) != 2 || ans.Reasons[1].Task == nil || ans.Reasons[1].Task.Worker != "w2" {
		t.Errorf("tasks %+v, reasons %+v", ans.Tasks, ans.Reasons)
	}

	// Queued with no worker of its type, and behind an older queued job.
	a.Jobs = fakeJobs{
		job:                        {ID: job, Type: "primes", State: jobs.StateQueued},
		"20261129-110000-0000cccc": {ID: "20261129-110000-0000cccc", Type: "pi", State: jobs.StateQueued},
	}
	ans, err = a.Explain(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	text = texts(ans)
	for _, want := range []string{`no running worker has type "primes" (they have: pi, sleep)`, "queued behind 1 job(s) submitted before it (the oldest 20261129-110000-0000cccc)"} {
		if !strings.Contains(text, want) {
			t.Errorf("queued answer lacks %q:\n%s", want, text)
		}
	}
}

// A waiting job names its predecessors not yet succeeded, or the leader's reason; an ended job
// waits for nothing.
func TestExplain_WaitingAndEnded(t *testing.T) {
	const job, p1, p2 = "20261129-120000-0123abcd", "20261129-110000-00000001", "20261129-110000-00000002"
	a := &Asker{Jobs: fakeJobs{
		job: {ID: job, State: jobs.StateWaiting, After: []string{p1, p2, "20261129-100000-0000dead"}},
		p1:  {ID: p1, State: jobs.StateRunning, ShardsDone: 4, ShardsTotal: 10},
		p2:  {ID: p2, State: jobs.StateSucceeded},
	}}
	ans, err := a.Explain(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if text := texts(ans); !strings.Contains(text, "waits for job "+p1+" (running, 4 of 10 shards)") || strings.Contains(text, p2) ||
		!strings.Contains(text, "predecessor 20261129-100000-0000dead no longer exists") {
		t.Errorf("waiting answer:\n%s", text)
	}
	a.Jobs = fakeJobs{job: {ID: job, State: jobs.StateWaiting, Error: `no leader with type "x"; workers with it: none`}}
	if ans, _ := a.Explain(context.Background(), job); len(ans.Reasons) != 1 || ans.Reasons[0].Kind != "type" {
		t.Errorf("type wait: %+v", ans)
	}
	a.Jobs = fakeJobs{job: {ID: job, State: jobs.StateSucceeded}}
	if ans, _ := a.Explain(context.Background(), job); len(ans.Reasons) != 0 {
		t.Errorf("an ended job waits for %+v", ans.Reasons)
	}
	if _, err := a.Explain(context.Background(), "20261129-000000-00000000"); err != client.ErrNoSuchJob {
		t.Errorf("a missing job: %v", err)
	}
}

func texts(a *Answer) string {
	var b strings.Builder
	for _, r := range a.Reasons {
		b.WriteString(r.Kind + ": " + r.Text + "\n")
	}
	return b.String()
}

func FuzzDecodeReply(f *testing.F) {
	ok, _ := json.Marshal(reply{Worker: "w1", Types: []string{"pi"}, Tasks: []Task{{Shard: 1, Attempt: 1, Since: time.Unix(1, 0)}}})
	f.Add(ok)
	f.Add([]byte(`{"worker":"","tasks":[]}`))
	f.Add([]byte(`{"worker":"w","tasks":[{"shard":-1}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeReply(data)
		if err != nil {
			return
		}
		if r.Worker == "" || len(r.Tasks) > maxReplyTasks {
			t.Fatalf("accepted a reply no worker sends: %+v", r)
		}
		for _, tk := range r.Tasks {
			if tk.Shard < 0 || tk.Attempt < 0 || tk.Since.IsZero() {
				t.Fatalf("accepted task %+v", tk)
			}
		}
	})
}
