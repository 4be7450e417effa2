package node

import (
	"flag"
	"testing"

	"github.com/mapagg/mapagg/builtin"
)

// TestFlagEnv_Table: every flag of `run` reads an environment variable, every connection flag of
// every command does too, and every entry of flagEnv is a flag some command has, with a variable
// of its own.
func TestFlagEnv_Table(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, c := range n.commands() {
		fs := c.flags()
		envs := map[string]string{}
		for _, fe := range fs.envFlags() {
			if fe.Flag != "" {
				envs[fe.Flag] = fe.Env
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			defined[f.Name] = true
			if (c.name == "run" || fs.conn[f.Name]) && envs[f.Name] == "" {
				t.Errorf("%s --%s: no environment variable", c.name, f.Name)
			}
			if envs[f.Name] != flagEnv[f.Name] {
				t.Errorf("%s --%s reads %q, flagEnv says %q", c.name, f.Name, envs[f.Name], flagEnv[f.Name])
			}
		})
	}
	owner := map[string]string{}
	for name, env := range flagEnv {
		if !defined[name] {
			t.Errorf("flagEnv names --%s, which no command has", name)
		}
		if other, ok := owner[env]; ok {
			t.Errorf("%s backs both --%s and --%s", env, name, other)
		}
		owner[env] = name
	}
}
