package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// budget is the most public names the module may export (issue 31: the engine lives under
// internal/, and the public surface is what a user programs against).
const budget = 450

// public are the packages a user programs against; any other package outside internal/ must
// export nothing. coordinator and worker are the roles' thin faces.
var public = []string{
	"builtin", "client", "clustertest", "coordinator", "election", "jobs", "jobs/jobstest",
	"node", "store", "worker",
}

// recorded lists the names as last accepted, one "package name" a line; the test names the
// packages that grew past it.
const recorded = "testdata/public.txt"

var update = flag.Bool("update", false, "rewrite "+recorded+" with today's names")

func TestPublicNames_WithinBudget(t *testing.T) {
	api, err := Count("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range public {
		if _, ok := api[want]; !ok {
			t.Errorf("public package %s not found: the count would miss it", want)
		}
	}
	if *update {
		if err := os.WriteFile(recorded, []byte(format(api)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := os.ReadFile(recorded)
	if err != nil {
		t.Fatal(err)
	}
	before := parse(string(old))
	for _, pkg := range api.Packages() {
		if !slices.Contains(public, pkg) && len(api[pkg]) > 0 {
			t.Errorf("package %s is outside internal/ and exports %d names (%s): only %s may; move it under internal/",
				pkg, len(api[pkg]), strings.Join(api[pkg], ", "), strings.Join(public, ", "))
		}
	}
	if total := api.Total(); total > budget {
		t.Errorf("%d public names, over the budget of %d; %s", total, budget, growth(api, before))
	}
	t.Logf("%d public names (budget %d)", api.Total(), budget)
}

// growth says which packages export more names than recorded, and the names they added.
func growth(api, before API) string {
	var b strings.Builder
	for _, pkg := range api.Packages() {
		var added []string
		for _, n := range api[pkg] {
			if !slices.Contains(before[pkg], n) {
				added = append(added, n)
			}
		}
		if len(api[pkg]) > len(before[pkg]) {
			fmt.Fprintf(&b, "\n  %s grew from %d to %d: new %s", pkg, len(before[pkg]), len(api[pkg]), strings.Join(added, ", "))
		}
	}
	if b.Len() == 0 {
		return "no package grew past " + recorded + ": cut names, or move them under internal/"
	}
	return "grown since " + recorded + ":" + b.String() +
		"\nmove names a user does not program against under internal/ (go run ./internal/harness/apicount -v lists them)"
}

func format(api API) string {
	var b strings.Builder
	for _, pkg := range api.Packages() {
		for _, n := range api[pkg] {
			fmt.Fprintf(&b, "%s %s\n", pkg, n)
		}
	}
	return b.String()
}

func parse(s string) API {
	api := API{}
	for line := range strings.Lines(s) {
		pkg, name, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			api[pkg] = append(api[pkg], name)
		}
	}
	return api
}

// The counting rule: exported top-level names and exported methods of exported types; not
// unexported ones, not methods of unexported types, not fields or interface methods, not tests,
// and only the files of the default build.
func TestCount_Rule(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(dir+"/"+name, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", `package p
type T struct{ F int; g int }
func (T) M() {}
func (*T) m() {}
type u struct{}
func (u) M() {}
type G[K any] struct{}
func (*G[K]) M() {}
type I interface{ M() }
const C, d = 1, 2
var V int
func F() {}
func f() {}
type A = T
`)
	write("a_test.go", "package p\nfunc Test() {}\n")
	write("race.go", "//go:build race\n\npackage p\nconst Race = true\n")
	names, ok, err := packageNames(dir)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := []string{"A", "C", "F", "G", "G.M", "I", "T", "T.M", "V"}
	if !slices.Equal(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
}
