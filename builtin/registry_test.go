package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// typedJob wraps a built-in under another name.
type typedJob struct {
	jobs.Job
	name string
}

func (t typedJob) Type() string { return t.name }

func TestRegistry_HasBuiltins(t *testing.T) {
	reg := Registry()
	got := reg.Types()
	want := []string{"pi", "primes", "regroup", "sleep", "wordcount"}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Registry().Types() = %v, missing %q", got, w)
		}
	}
	for _, w := range want {
		j, err := reg.Lookup(w)
		if err != nil {
			t.Fatalf("Lookup(%q): %v", w, err)
		}
		if j.Type() != w {
			t.Errorf("Lookup(%q).Type() = %q", w, j.Type())
		}
	}
}

func TestRegistry_Lookup_Unknown(t *testing.T) {
	r := jobs.NewRegistry()
	for _, j := range Jobs() {
		if err := r.Register(j); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Lookup("prime")
	if !errors.Is(err, jobs.ErrUnknownType) {
		t.Fatalf("Lookup(prime) error %v does not match ErrUnknownType", err)
	}
	var ute *jobs.UnknownTypeError
	if !errors.As(err, &ute) || ute.Type != "prime" {
		t.Fatalf("Lookup(prime) error %#v is not an *jobs.UnknownTypeError for prime", err)
	}
	const want = `unknown job type "prime"; known: pi, primes, regroup, sleep, wordcount`
	if err.Error() != want {
		t.Errorf("message = %q, want %q", err.Error(), want)
	}
	if errors.Is(err, jobs.ErrBadParams) {
		t.Error("an unknown type matches ErrBadParams")
	}

	_, err = jobs.NewRegistry().Lookup("x")
	if !errors.Is(err, jobs.ErrUnknownType) || !strings.Contains(err.Error(), "no job types are registered") {
		t.Errorf("empty registry: %v", err)
	}
}

func TestRegistry_Register_Refuses(t *testing.T) {
	r := jobs.NewRegistry()
	if err := r.Register(primesJob); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		job  jobs.Job
		is   error
	}{
		{"nil", nil, nil},
		{"empty", typedJob{sleep{}, ""}, nil},
		{"space", typedJob{sleep{}, "my job"}, nil},
		{"slash", typedJob{sleep{}, "a/b"}, nil},
		{"too long", typedJob{sleep{}, strings.Repeat("x", 65)}, nil},
		{"duplicate", primesJob, jobs.ErrDuplicateType},
		{"duplicate other impl", typedJob{sleep{}, "primes"}, jobs.ErrDuplicateType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Register(tt.job)
			if err == nil {
				t.Fatal("jobs.Register succeeded")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not match %v", err, tt.is)
			}
		})
	}
	if got := r.Types(); !slices.Equal(got, []string{"primes"}) {
		t.Errorf("Types() = %v after refused registrations", got)
	}
	j, err := r.Lookup("primes")
	if err != nil || j != primesJob {
		t.Errorf("duplicate registration replaced the job: %v %v", j, err)
	}
}

func TestRegister_AddsToDefault(t *testing.T) {
	const name = "test-register-adds-to-default"
	if err := jobs.Register(typedJob{sleep{}, name}); err != nil {
		t.Fatal(err)
	}
	j, err := jobs.Default().Lookup(name)
	if err != nil || j.Type() != name {
		t.Fatalf("Lookup(%q) = %v, %v", name, j, err)
	}
	if err := jobs.Register(typedJob{sleep{}, name}); !errors.Is(err, jobs.ErrDuplicateType) {
		t.Errorf("second Register: %v", err)
	}
	// A registered job is usable through the registry.
	shards, err := j.Split(context.Background(), nil, json.RawMessage(`{"shards": 2}`))
	if err != nil || len(shards) != 2 {
		t.Errorf("Split through the registry: %d shards, %v", len(shards), err)
	}
}

func TestRegistry_Concurrent(t *testing.T) {
	r := jobs.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 50 {
				name := fmt.Sprintf("job-%d-%d", i, k)
				if err := r.Register(typedJob{sleep{}, name}); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.Lookup(name); err != nil {
					t.Error(err)
					return
				}
				_ = r.Types()
			}
		}()
	}
	wg.Wait()
	if n := len(r.Types()); n != 8*50 {
		t.Errorf("%d types registered, want %d", n, 8*50)
	}
	if !slices.IsSorted(r.Types()) {
		t.Error("Types() is not sorted")
	}
}
