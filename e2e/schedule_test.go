package e2e

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// The figure, at twice the pace: a schedule firing every 2 s for 24 s (the figure: 40 s),
// with the leader SIGKILLed three times and SIGTERMed once, 5 s apart, makes one job per tick: no
// tick twice, none missing between the first and the last. `make chaos` runs schedule-leader-kill,
// schedule-leader-stop and schedule-blob-kill on the same schedule.
func TestSchedule_EveryTwoSecondsThroughLeaderKills(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, LeaseDuration: lease})
	ctx := context.Background()
	leader(t, c)
	if _, err := c.Client.AddSchedule(ctx, "figure", client.ScheduleOptions{Every: 2 * time.Second, Type: "sleep",
		Params: json.RawMessage(`{"shards":2}`), Overlap: protocol.OverlapAllow, CatchUp: time.Minute}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGKILL, syscall.SIGKILL, syscall.SIGTERM} {
		time.Sleep(time.Until(begin.Add(time.Duration(i+1) * 5 * time.Second)))
		old := leader(t, c)
		at, err := c.Signal(old.ID, sig)
		if err != nil {
			t.Fatal(err)
		}
		nu, took := newLeader(t, c, old, at, lease+acquireEvery+time.Second)
		t.Logf("%v of %s (epoch %d) → %s (epoch %d) after %v", sig, old.ID, old.Epoch, nu.ID, nu.Epoch, took)
		if _, err := c.StartWorker(old.ID); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(begin.Add(24 * time.Second)))
	if err := c.Client.PauseSchedule(ctx, "figure"); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	time.Sleep(3 * time.Second) // a tick being fired as it was paused lands

	byTick, ticks := scheduleTicks(t, c, "figure")
	want := int(end.Sub(begin) / (2 * time.Second))
	t.Logf("%d ticks in %v (%d possible), first %v after the schedule was added", len(ticks), end.Sub(begin).Round(time.Second), want, ticks[0].Sub(begin).Round(time.Millisecond))
	if len(ticks) < want-2 {
		t.Fatalf("%d ticks, want at least %d (at most two missing at the window's edges)", len(ticks), want-2)
	}
	// Every job it made runs once to its end.
	for _, ids := range byTick {
		finish(t, c, ids[0])
	}
}

// scheduleTicks reads the jobs schedule name made, by tick, and checks that no tick made two
// and that ticks are 2 s apart with none missing. It returns them, sorted.
func scheduleTicks(t *testing.T, c *cluster.Cluster, name string) (map[time.Time][]string, []time.Time) {
	t.Helper()
	ctx := context.Background()
	st := c.Client.Store.(*store.Container)
	blobs, err := st.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	byTick := map[time.Time][]string{}
	for _, b := range blobs {
		if !strings.HasSuffix(b.Name, "/spec.json") {
			continue
		}
		data, _, err := st.Get(ctx, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := protocol.ParseSpec(data)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Schedule == name {
			byTick[spec.Tick.UTC()] = append(byTick[spec.Tick.UTC()], spec.ID)
		}
	}
	var ticks []time.Time
	for tk, ids := range byTick {
		if len(ids) != 1 {
			t.Errorf("tick %v made %d jobs: %v", tk, len(ids), ids)
		}
		ticks = append(ticks, tk)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != 2*time.Second {
			t.Errorf("ticks %v and %v are %v apart: a tick is missing", ticks[i-1], ticks[i], d)
		}
	}
	if len(ticks) == 0 {
		t.Fatalf("schedule %s made no job", name)
	}
	return byTick, ticks
}

// The same schedule through a leader stopped (SIGSTOP) past its lease and continued, and a
// storage rollback (azurite-blob killed with kill -9 loses its last seconds of writes: tick
// markers, specs, the schedule's state): one job per tick, none missing.
func TestSchedule_ThroughLeaderStopAndStorageRollback(t *testing.T) {
	opts := cluster.Options{Workers: 3, Concurrency: 1, LeaseDuration: lease, Dir: t.TempDir(), WorkerBin: workerBin, Namespace: testenv.Name(t, "e2e")}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := cluster.Start(sctx, opts) // its own Azurite, to kill
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx := context.Background()
	leader(t, c)
	if _, err := c.Client.AddSchedule(ctx, "rollback", client.ScheduleOptions{Every: 2 * time.Second, Type: "sleep",
		Params: json.RawMessage(`{"shards":2}`), Overlap: protocol.OverlapAllow, CatchUp: time.Minute}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	time.Sleep(6 * time.Second)
	old := leader(t, c)
	p := c.Proc(old.ID)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	nu, took := newLeader(t, c, old, stopped, lease+acquireEvery+time.Second)
	t.Logf("SIGSTOP of %s (epoch %d) → %s (epoch %d) after %v", old.ID, old.Epoch, nu.ID, nu.Epoch, took)
	time.Sleep(time.Until(stopped.Add(lease + 2*time.Second)))
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	az := c.Azurite()
	if err := az.Kill(devserver.Blob, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := az.Restart(devserver.Blob); err != nil {
		t.Fatal(err)
	}
	t.Logf("azurite-blob killed and restarted %v after the start", time.Since(begin).Round(time.Second))
	time.Sleep(time.Until(begin.Add(40 * time.Second)))
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		return c.Client.PauseSchedule(ctx, "rollback") == nil
	}, "cannot pause the schedule")
	end := time.Now()
	time.Sleep(3 * time.Second)
	byTick, ticks := scheduleTicks(t, c, "rollback")
	want := int(end.Sub(begin) / (2 * time.Second))
	t.Logf("%d ticks in %v (%d possible)", len(ticks), end.Sub(begin).Round(time.Second), want)
	if len(ticks) < want-2 {
		t.Fatalf("%d ticks, want at least %d", len(ticks), want-2)
	}
	for _, ids := range byTick {
		finish(t, c, ids[0])
	}
}
