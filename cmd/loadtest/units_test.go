package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

func TestClassify_Cases(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	killed := []victim{{worker: "w1", exited: at(100)}}
	for _, c := range []struct {
		name    string
		results []rig.ResultObs
		disp    map[int]int
		want    redo
	}{
		{"clean", []rig.ResultObs{{T: at(10), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(20), Index: 1, Attempt: 1, Worker: "w2"}}, map[int]int{0: 1, 1: 1}, redo{results: 2}},
		{"retried publish is one execution", []rig.ResultObs{{T: at(10), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(11), Index: 0, Attempt: 1, Worker: "w2"}}, nil, redo{results: 2}},
		{"in flight on the victim, redelivered", []rig.ResultObs{{T: at(10), Index: 0, Attempt: 2, Worker: "w2"}}, nil, redo{redelivered: 1, redone: 1, results: 1}},
		{"completed by the victim before it died, then again", []rig.ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			redo{redelivered: 1, completedTwice: 1, redone: 1, results: 2}},
		{"completed by a survivor, then again", []rig.ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			redo{redelivered: 1, completedTwice: 1, redone: 1, completedRerun: 1, results: 2}},
		{"completed by the restarted victim, then again", []rig.ResultObs{{T: at(900), Index: 0, Attempt: 1, Worker: "w1"}, {T: at(5000), Index: 0, Attempt: 2, Worker: "w3"}}, nil,
			redo{redelivered: 1, completedTwice: 1, redone: 1, completedRerun: 1, results: 2}},
		{"re-dispatch counted", nil, map[int]int{0: 2, 1: 1, 2: 3}, redo{redispatched: 3}},
		{"backed up by the leader, run twice on purpose", []rig.ResultObs{{T: at(50), Index: 0, Attempt: 1, Worker: "w2"}, {T: at(90), Index: 0, Attempt: 1, Worker: "w3"}}, map[int]int{0: 2},
			redo{redispatched: 1, backedUp: 1, results: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var backups map[int]bool
			if strings.HasPrefix(c.name, "backed up") {
				backups = map[int]bool{0: true}
			}
			if got := classify(c.results, c.disp, backups, killed); got != c.want {
				t.Errorf("classify = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseFlags_QuickAndOverrides(t *testing.T) {
	var stderr bytes.Buffer
	cfg, out, err := parseFlags([]string{"--quick", "--crash-runs", "3", "--json", "r.json", "--scenarios", "crash,throughput"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	q := QuickConfig()
	if cfg.CrashRuns != 3 || cfg.ThroughputShards != q.ThroughputShards || !cfg.Quick || out.json != "r.json" {
		t.Errorf("quick with overrides: %+v, %+v", cfg, out)
	}
	if !slices.Equal(cfg.Scenarios, []string{scCrash, scThroughput}) {
		t.Errorf("scenarios %v", cfg.Scenarios)
	}
	if cfg.Seed == 0 {
		t.Error("a random seed must be chosen")
	}
	cfg, _, err = parseFlags(nil, &stderr)
	if err != nil || cfg.ThroughputShards != DefaultConfig().ThroughputShards || cfg.Quick {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{
		{"--scenarios", "crash,bogus"}, {"--lease-duration", "14s"}, {"--workers", "1"}, {"--baseline-prefetch", "x"}, {"extra"},
	} {
		if _, _, err := parseFlags(bad, &stderr); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
