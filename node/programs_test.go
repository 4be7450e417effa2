package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// Program settings that cannot work are refused before anything connects.
func TestConfig_ProgramSettings(t *testing.T) {
	cases := map[string]func(*Config){
		`--program: program "nocommand": want NAME=COMMAND`: func(c *Config) { c.Programs = []string{"nocommand"} },
		"--program: wc is given twice":                      func(c *Config) { c.Programs = []string{"wc=cat", "wc=awk"} },
		"--program-env AZURE_CLIENT_SECRET: the name looks like a secret": func(c *Config) {
			c.ProgramEnv = []string{"OK_VAR", "AZURE_CLIENT_SECRET"}
		},
		"--program-timeout -1s": func(c *Config) { c.ProgramTimeout = -1e9 },
	}
	for want, set := range cases {
		d := DefaultConfig()
		d.Storage.ConnectionString = "UseDevelopmentStorage=true"
		set(&d)
		if err := d.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to report %q", err, want)
		}
	}
}

// The registry a node serves: its own types plus the programs that pass their check; one that
// is missing or not executable is left out, saying why.
func TestPrograms_Registry(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := jobs.NewRegistry()
	if err := base.Register(jobs.Typed("own", ownJob{})); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs), nil))
	cfg := Config{Programs: []string{"echo=cat", "missing=/no/such/program", "plain=" + plain}}
	reg, progs, err := programs(context.Background(), base, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Types(), ","); got != "echo,own" {
		t.Errorf("types %s, want echo,own", got)
	}
	if got := strings.Join(programNames(progs), ","); got != "echo" {
		t.Errorf("programs %s, want echo", got)
	}
	for _, want := range []string{"program left out", "/no/such/program does not exist", "is not executable"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if _, _, err := programs(context.Background(), base, Config{Programs: []string{"own=cat"}}, log); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a program named as a built-in type: %v, want ErrInvalidConfig", err)
	}
}

type ownParams struct{}

type ownJob struct{}

func (ownJob) Split(context.Context, jobs.Env, ownParams) ([]int, error) { return []int{1}, nil }
func (ownJob) Map(context.Context, jobs.Env, int) (int, error)           { return 1, nil }
func (ownJob) Merge(a, b int) int                                        { return a + b }
