package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseDurations(t *testing.T) {
	got, err := parseDurations(" 2ms, 5ms,")
	if err != nil || len(got) != 2 || got[0] != 2*time.Millisecond || got[1] != 5*time.Millisecond {
		t.Fatalf("parseDurations = %v, %v", got, err)
	}
	for _, bad := range []string{"2", "x", "-1ms", "0s"} {
		if _, err := parseDurations(bad); err == nil || !strings.Contains(err.Error(), "positive duration") {
			t.Errorf("parseDurations(%q) = %v, want a clear error", bad, err)
		}
	}
}

func TestValidate_NewScenarioSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no efficiency duration", func(c *Config) { c.EfficiencyDurations = nil }, "efficiency"},
		{"outage too long", func(c *Config) { c.OutageDuration = time.Hour }, "outage duration"},
		{"loaded too short", func(c *Config) { c.LoadedDuration = time.Millisecond }, "loaded duration"},
		{"million too big", func(c *Config) { c.MillionShards = 2_000_000 }, "million"},
		{"wordcount tiny shards", func(c *Config) { c.WordcountShardBytes = 10 }, "wordcount"},
		{"straggler without delay", func(c *Config) { c.StragglerDelay = 0 }, "straggler"},
		{"straggler on one worker", func(c *Config) { c.StragglerWorkers = 1 }, "straggler workers"},
		{"straggler small job tiny", func(c *Config) { c.StragglerSmallShards = 5 }, "straggler small shards"},
		{"no keyed round", func(c *Config) { c.KeyedRounds = 0 }, "--keyed-rounds"},
		{"no keyed-loaded run", func(c *Config) { c.KeyedLoadedRuns = 0 }, "--keyed-loaded-runs"},
		{"more users than rows", func(c *Config) { c.CSVKeys = c.CSVRows + 1 }, "csv-sum"},
		{"no csv round", func(c *Config) { c.CSVRounds = 0 }, "--csv-rounds"},
		{"no programs corpus", func(c *Config) { c.ProgramsMB = 0 }, "--programs-mb"},
		{"programs corpus too big", func(c *Config) { c.ProgramsMB = 4096 }, "--programs-mb"},
		{"no programs round", func(c *Config) { c.ProgramsRounds = 0 }, "--programs-rounds"},
		{"too many programs rounds", func(c *Config) { c.ProgramsRounds = 21 }, "--programs-rounds"},
		{"no small job", func(c *Config) { c.SmallJobRuns = 0 }, "small-job runs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mod(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, c.want)
			}
		})
	}
	if cfg := DefaultConfig(); cfg.Validate() != nil {
		t.Fatalf("default config invalid: %v", cfg.Validate())
	}
}

// Without the programs scenario its settings are not checked.
func TestValidate_ProgramsSettingsOnlyWhenRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenarios, cfg.ProgramsMB, cfg.ProgramsRounds = []string{scCrash}, 0, 0
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate = %v, want nil: programs does not run", err)
	}
}
