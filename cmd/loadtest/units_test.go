package main

import (
	"bytes"
	"slices"
	"testing"
)

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
