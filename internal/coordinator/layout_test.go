package coordinator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// readingOrder is the package's files in the order doc.go gives ("Components"): each names only
// what the files after it declare. A file not listed (a new one) is left out of the check.
var readingOrder = []string{
	"coordinator.go",
	"cancel.go", "merge.go", "backup.go", "claim.go", "keyedterm.go", "repair.go", "finish.go", "fair.go",
	"intakeloop.go", "waiting.go", "after.go", "smalljob.go",
	"term.go",
	"intake.go", "visibility.go",
	"dispatch.go", "checkpoint.go", "lost.go", "plan.go", "jobtable.go",
	"keyed.go", "runner.go",
	"isolate.go", "job.go", "straggler.go", "events.go", "status.go", "queuehealth.go", "face.go",
	"doc.go",
}

// layoutKnot is the one place where the reading order is knowingly broken: a job holds its
// runner, whose methods take the job; what a runner asks of its host names keyedRun.
var layoutKnot = map[string]bool{"job.go -> runner.go": true, "runner.go -> keyed.go": true}

// fileUses maps "a.go -> b.go" to the names a.go uses that b.go declares, for the package's
// non-test files in dir. It reads names, not types: a package-level name is b.go's when b.go
// declares it; a selected name (x.m) is b.go's when b.go alone declares a method, a field or an
// interface method m, and m is unexported (an exported one is mostly a port's, from outside).
func fileUses(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	top := map[string]string{}              // package-level name → its file
	methods := map[string]map[string]bool{} // method, field or interface method → the files declaring one
	for _, p := range paths {
		name := filepath.Base(p)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					top[d.Name.Name] = name
					continue
				}
				declare(methods, d.Name.Name, name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						top[s.Name.Name] = name
						selectable(methods, s.Type, name)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.Name != "_" {
								top[n.Name] = name
							}
						}
					}
				}
			}
		}
	}
	uses := map[string]map[string]bool{}
	add := func(from, to, name string) {
		if to == "" || to == from {
			return
		}
		k := from + " -> " + to
		if uses[k] == nil {
			uses[k] = map[string]bool{}
		}
		uses[k][name] = true
	}
	for name, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				ast.Inspect(n.X, func(m ast.Node) bool { // the selected name is not a package-level one
					if id, ok := m.(*ast.Ident); ok {
						add(name, top[id.Name], id.Name)
					}
					return true
				})
				if in := methods[n.Sel.Name]; len(in) == 1 && !ast.IsExported(n.Sel.Name) {
					for to := range in {
						add(name, to, n.Sel.Name)
					}
				}
				return false
			case *ast.Ident:
				add(name, top[n.Name], n.Name)
			}
			return true
		})
	}
	out := map[string][]string{}
	for k, ns := range uses {
		for n := range ns {
			out[k] = append(out[k], n)
		}
		sort.Strings(out[k])
	}
	return out
}

func declare(m map[string]map[string]bool, name, file string) {
	if m[name] == nil {
		m[name] = map[string]bool{}
	}
	m[name][file] = true
}

// selectable declares the fields of a struct type and the methods of an interface type.
func selectable(m map[string]map[string]bool, typ ast.Expr, file string) {
	var fields *ast.FieldList
	switch typ := typ.(type) {
	case *ast.StructType:
		fields = typ.Fields
	case *ast.InterfaceType:
		fields = typ.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			declare(m, n.Name, file)
		}
	}
}

// TestLayout_ReadingOrder fails when a file names what a file above it in the reading order
// declares (but for the knot), so the chapters keep reading from the top down. -v prints the
// counts.
func TestLayout_ReadingOrder(t *testing.T) {
	uses := fileUses(t, ".")
	pos := map[string]int{}
	for i, f := range readingOrder {
		pos[f] = i
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			if _, ok := pos[n]; !ok {
				t.Logf("%s is not in the reading order (doc.go, readingOrder): left out of the check", n)
			}
		}
	}
	var up []string
	within := 0
	for k, names := range uses {
		from, to, _ := strings.Cut(k, " -> ")
		pf, okf := pos[from]
		pt, okt := pos[to]
		if !okf || !okt {
			continue
		}
		within++
		if pf > pt {
			up = append(up, k+": "+strings.Join(names, ", "))
			if !layoutKnot[k] {
				t.Errorf("%s names what a file above it declares: %s (move the name down, or declare a small interface where it is used)", from, k+": "+strings.Join(names, ", "))
			}
		}
	}
	slices.Sort(up)
	t.Logf("%d file-to-file uses, %d run back up the reading order:\n%s", within, len(up), strings.Join(up, "\n"))
}
