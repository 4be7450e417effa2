package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func TestSleep_EveryShardCountedOnce(t *testing.T) {
	for _, n := range []int{1, 2, 10, 1000} {
		params := fmt.Sprintf(`{"shards": %d, "duration": "0s", "fail_rate": 0.3, "seed": 11}`, n)
		res := jobstest.Run(t, sleep{}, nil, params)
		var got SleepResult
		if err := json.Unmarshal(res, &got); err != nil {
			t.Fatal(err)
		}
		if got.Shards != uint64(n) || got.IndexSum != uint64(n*(n-1)/2) {
			t.Errorf("shards=%d: result %+v, want shards %d, index_sum %d", n, got, n, n*(n-1)/2)
		}
	}
}

// failingFirst maps every shard on its first attempt and returns the indices that failed; every
// failed shard must succeed on attempt 2.
func failingFirst(t *testing.T, params string) []int {
	t.Helper()
	shards, err := sleep{}.Split(context.Background(), nil, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	var failed []int
	for i, s := range shards {
		if _, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Index: i, Attempt: 1, Shard: s}); err != nil {
			if !strings.Contains(err.Error(), "first attempt") {
				t.Fatalf("shard %d: %v", i, err)
			}
			failed = append(failed, i)
			if _, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Index: i, Attempt: 2, Shard: s}); err != nil {
				t.Fatalf("shard %d failed its second attempt: %v", i, err)
			}
		}
	}
	return failed
}

func TestSleep_FailRate(t *testing.T) {
	a := failingFirst(t, `{"shards": 10000, "fail_rate": 0.1, "seed": 1}`)
	b := failingFirst(t, `{"shards": 10000, "fail_rate": 0.1, "seed": 1}`)
	c := failingFirst(t, `{"shards": 10000, "fail_rate": 0.1, "seed": 2}`)
	if !slices.Equal(a, b) {
		t.Error("the same seed failed different shards")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 1 and 2 failed the same shards")
	}
	// Deterministic: the hash of (seed, index) is fixed.
	if len(a) < 900 || len(a) > 1100 {
		t.Errorf("fail_rate 0.1 failed %d of 10000 shards", len(a))
	}
	if n := len(failingFirst(t, `{"shards": 500, "fail_rate": 1}`)); n != 500 {
		t.Errorf("fail_rate 1 failed %d of 500", n)
	}
	if n := len(failingFirst(t, `{"shards": 500, "fail_rate": 0, "seed": 3}`)); n != 0 {
		t.Errorf("fail_rate 0 failed %d of 500", n)
	}
}

func TestSleep_FailAndPanicAlways(t *testing.T) {
	shards, err := sleep{}.Split(context.Background(), nil,
		json.RawMessage(`{"shards": 5, "fail_rate": 1, "fail_always": [1], "panic_always": [3]}`))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 5; attempt++ {
		_, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Index: 1, Attempt: attempt, Shard: shards[1]})
		if err == nil || !strings.Contains(err.Error(), "every attempt") {
			t.Errorf("fail_always shard, attempt %d: %v", attempt, err)
		}
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "panic_always") {
					t.Errorf("panic_always shard, attempt %d: recovered %v", attempt, r)
				}
			}()
			_, _ = (sleep{}).Map(context.Background(), nil, jobs.Task{Index: 3, Attempt: attempt, Shard: shards[3]})
		}()
	}
	// The other shards fail first (fail_rate 1) and succeed after.
	if _, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Index: 0, Attempt: 1, Shard: shards[0]}); err == nil {
		t.Error("shard 0 succeeded on attempt 1 with fail_rate 1")
	}
	if p, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Index: 4, Attempt: 2, Shard: shards[4]}); err != nil || string(p) != string(encodeSleepPartial(1, 4)) {
		t.Errorf("shard 4, attempt 2: %x, %v", p, err)
	}
}

func TestSleep_MapSleepsAndStopsWithContext(t *testing.T) {
	shards, err := sleep{}.Split(context.Background(), nil, json.RawMessage(`{"shards": 1, "duration": "1h"}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := (sleep{}).Map(ctx, nil, jobs.Task{Attempt: 1, Shard: shards[0]})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Map after cancel = %v, want context.Canceled", err)
	}

	// A deadline shorter than the duration ends the sleep: Map does sleep, and stops in time.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := (sleep{}).Map(ctx, nil, jobs.Task{Attempt: 1, Shard: shards[0]}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Map past its deadline = %v, want context.DeadlineExceeded", err)
	}
}

func TestSleep_MapBadShard(t *testing.T) {
	for _, shard := range []string{``, `{}x`, `{"i": -1, "ns": 0}`, `{"i": 1000000, "ns": 0}`, `{"i": 1, "ns": -1}`,
		`{"i": 1, "ns": 3600000000001}`, `{"i": 1, "ns": 1, "mode": "explode"}`, `{"i": 1, "ns": 1, "x": 1}`} {
		if _, err := (sleep{}).Map(context.Background(), nil, jobs.Task{Attempt: 1, Shard: []byte(shard)}); !errors.Is(err, jobs.ErrBadShard) {
			t.Errorf("Map(%q) = %v, want jobs.ErrBadShard", shard, err)
		}
	}
}

func TestSleepAggregate(t *testing.T) {
	params := json.RawMessage(`{"shards": 4}`)
	agg, _ := sleep{}.NewAggregate(params)
	for _, bad := range [][]byte{
		nil, {tagSleep, 1, 1}, encodeSleepPartial(5, 0), encodeSleepPartial(1, 4), encodeSleepPartial(2, 7), encodePiPartial(1, 1),
		encodeSleepPartial(1<<63, 1<<63),
	} {
		if err := agg.Merge(bad); !errors.Is(err, jobs.ErrBadPartial) {
			t.Errorf("Merge(%x) = %v, want jobs.ErrBadPartial", bad, err)
		}
		if err := agg.UnmarshalBinary(bad); !errors.Is(err, jobs.ErrBadCheckpoint) {
			t.Errorf("UnmarshalBinary(%x) = %v, want jobs.ErrBadCheckpoint", bad, err)
		}
	}
	for i := range uint64(4) {
		if err := agg.Merge(encodeSleepPartial(1, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := agg.Merge(encodeSleepPartial(1, 0)); !errors.Is(err, jobs.ErrBadPartial) {
		t.Errorf("a fifth shard of four merged: %v", err)
	}
	if res, err := agg.Result(); err != nil || string(res) != `{"shards":4,"index_sum":6}` {
		t.Errorf("Result = %s, %v", res, err)
	}
}

func FuzzSleepParams(f *testing.F) {
	for _, s := range []string{
		`{"shards": 100, "duration": "50ms", "fail_rate": 0.1, "seed": 1}`, `{"shards": 3, "fail_always": [0], "panic_always": [2]}`,
		`{"shards": 3, "duration": "1h1s"}`, `{"shards": 3, "fail_rate": 2}`, `{"shards": 1, "fail_always": [1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		checkParamsFuzz(t, sleep{}, params, splitIsCheap(params))
	})
}

func FuzzSleepShard(f *testing.F) {
	for _, s := range []string{`{"i": 3, "ns": 0}`, `{"i": 3, "ns": 1000, "mode": "fail_first"}`, `{"i": 0, "ns": 0, "mode": "panic_always"}`,
		`{"i": 7, "ns": 3600000000000, "mode": "fail_always"}`} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, shard []byte, attempt int) {
		s, decErr := decodeSleepShard(shard)
		// Never sleep long: the context ends after a millisecond.
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		defer func() {
			if r := recover(); r != nil && (decErr != nil || s.Mode != sleepPanicAlways) {
				t.Fatalf("Map panicked on a shard that is not panic_always: %v", r)
			}
		}()
		p, err := sleep{}.Map(ctx, nil, jobs.Task{Attempt: attempt, Shard: shard})
		if decErr != nil {
			if !errors.Is(err, jobs.ErrBadShard) {
				t.Fatalf("Map of an undecodable shard = %v", err)
			}
			return
		}
		if err == nil {
			if n, sum, err := decodeSleepPartial(p); err != nil || n != 1 || sum != uint64(s.Index) {
				t.Fatalf("Map's partial: %d, %d, %v", n, sum, err)
			}
		}
	})
}

func FuzzSleepAggregate(f *testing.F) {
	jobstest.FuzzAggregate(f, sleep{}, `{"shards": 10}`,
		encodeSleepPartial(1, 9), encodeSleepPartial(1, 5), encodeSleepPartial(10, 45), encodeSleepPartial(11, 0))
}
