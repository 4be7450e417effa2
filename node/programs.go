package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/mapagg/mapagg/internal/program"
	"github.com/mapagg/mapagg/jobs"
)

// registerProgramFlags adds the programs this worker runs as job types (internal/program).
func registerProgramFlags(fs *flagSet, c *Config) {
	fs.Var((*programList)(&c.Programs), "program", "run a program as job type NAME: NAME=COMMAND, COMMAND split into words as a shell would, never run by a shell; "+
		"repeat the flag for more (env: one NAME=COMMAND a line); nothing a submitter sends is executed")
	fs.DurationVar(&c.ProgramTimeout, "program-timeout", 0, "time limit of one run of a program (a map, combine or reduce task) (default 30m)")
	fs.Var((*commaList)(&c.ProgramEnv), "program-env", "comma-separated names of variables of this worker's environment passed to programs, beyond PATH, HOME, LANG, LC_*, TZ and Python's; a name that looks like a secret is refused")
}

// programList is the repeatable --program flag; one value may hold several programs, one a line
// (the environment variable).
type programList []string

func (p *programList) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(*p, "\n")
}

func (p *programList) Set(s string) error {
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if _, err := program.ParseSpec(line); err != nil {
			return err
		}
		*p = append(*p, strings.TrimSpace(line))
	}
	return nil
}

// commaList is a flag of comma-separated names.
type commaList []string

func (c *commaList) String() string {
	if c == nil {
		return ""
	}
	return strings.Join(*c, ",")
}

func (c *commaList) Set(s string) error {
	*c = (*c)[:0]
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*c = append(*c, v)
		}
	}
	return nil
}

// checkPrograms refuses program settings that cannot work, before anything starts.
func checkPrograms(c Config) error {
	names := map[string]bool{}
	for _, s := range c.Programs {
		spec, err := program.ParseSpec(s)
		if err != nil {
			return fmt.Errorf("--program: %v", err)
		}
		if names[spec.Name] {
			return fmt.Errorf("--program: %s is given twice", spec.Name)
		}
		names[spec.Name] = true
	}
	if c.ProgramTimeout < 0 {
		return fmt.Errorf("--program-timeout %v: use a duration above 0, or 0 for 30m", c.ProgramTimeout)
	}
	for _, name := range c.ProgramEnv {
		if program.IsSecretName(name) {
			return fmt.Errorf("--program-env %s: the name looks like a secret (it holds KEY, TOKEN, PASSWORD or the like): programs never get secrets", name)
		}
	}
	return nil
}

// programs is the registry a node serves: base plus the programs that passed their check at
// start, and the programs' names. A program that is missing, not executable or fails its
// describe run is left out with an error log that says why; a program whose name base has
// already is an error.
func programs(ctx context.Context, base *jobs.Registry, c Config, log *slog.Logger) (*jobs.Registry, []*program.Program, error) {
	if len(c.Programs) == 0 {
		return base, nil, nil
	}
	reg := jobs.NewRegistry()
	for _, t := range base.Types() {
		j, err := base.Lookup(t)
		if err == nil {
			err = reg.Register(j)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	pcfg := program.Config{Timeout: c.ProgramTimeout, Env: c.ProgramEnv, Logger: log}
	specs := make([]program.Spec, len(c.Programs))
	for i, s := range c.Programs {
		spec, err := program.ParseSpec(s)
		if err != nil {
			return nil, nil, err
		}
		if _, err := base.Lookup(spec.Name); err == nil {
			return nil, nil, fmt.Errorf("%w: program %s: this binary has a job type of that name already", ErrInvalidConfig, spec.Name)
		}
		specs[i] = spec
	}
	// The describe runs go at once: an interpreter's start can take seconds on a busy host.
	checked := make([]*program.Program, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			checked[i], errs[i] = program.New(ctx, spec, pcfg)
		}()
	}
	wg.Wait()
	var progs []*program.Program
	for i, spec := range specs {
		if errs[i] != nil {
			log.Error("program left out: this worker does not take its jobs", "program", spec.Name, "command", spec.String(), "err", errs[i])
			continue
		}
		if err := reg.RegisterKeyed(checked[i]); err != nil {
			return nil, nil, err
		}
		log.Info("program registered", "program", spec.Name, "command", spec.String(), "combine", checked[i].Capabilities().Combine)
		progs = append(progs, checked[i])
	}
	return reg, progs, nil
}

// programNames returns the names of progs, sorted, for the types listing.
func programNames(progs []*program.Program) []string {
	var names []string
	for _, p := range progs {
		names = append(names, p.Type())
	}
	slices.Sort(names)
	return names
}
