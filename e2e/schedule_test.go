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
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// The figure: a schedule firing every 2 s for 40 s, with the leader SIGKILLed three
// times and SIGTERMed once, makes one job per tick: no tick twice, none missing between the
// first and the last.
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
		time.Sleep(time.Until(begin.Add(time.Duration(i+1) * 8 * time.Second)))
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
	time.Sleep(time.Until(begin.Add(40 * time.Second)))
	if err := c.Client.PauseSchedule(ctx, "figure"); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	time.Sleep(3 * time.Second) // a tick being fired as it was paused lands

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
		if spec.Schedule == "figure" {
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
