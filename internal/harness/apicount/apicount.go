// Command apicount counts the module's public names: the exported top-level identifiers and the
// exported methods of exported types (struct fields are not counted) of every package outside
// internal/, cmd/, examples/ and e2e/. Its test holds the total to a budget.
//
//	go run ./internal/harness/apicount        # a count per package and the total
//	go run ./internal/harness/apicount -v     # every name
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// skipped are the top-level folders whose packages are not public: the engine, the commands, the
// examples and the end-to-end tests.
var skipped = []string{"internal", "cmd", "examples", "e2e"}

func main() {
	verbose := flag.Bool("v", false, "list every name")
	root := flag.String("root", ".", "the module's root folder")
	flag.Parse()
	api, err := Count(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	total := 0
	for _, pkg := range api.Packages() {
		names := api[pkg]
		total += len(names)
		fmt.Printf("%5d  %s\n", len(names), pkg)
		if *verbose {
			for _, n := range names {
				fmt.Printf("         %s\n", n)
			}
		}
	}
	fmt.Printf("%5d  total\n", total)
}

// API is the public names of a module, by package path relative to its root ("client",
// "jobs/jobstest"); each list is sorted.
type API map[string][]string

// Packages returns the package paths in order.
func (a API) Packages() []string {
	pkgs := make([]string, 0, len(a))
	for p := range a {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs
}

// Total returns the number of names over every package.
func (a API) Total() int {
	n := 0
	for _, names := range a {
		n += len(names)
	}
	return n
}

// Count reads every public package under root (a module's root folder) and returns its names.
// Files are those of the default build (no race tag, this machine's GOOS and GOARCH); tests are
// left out.
func Count(root string) (API, error) {
	api := API{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "testdata" || name == "node_modules" || slices.Contains(skipped, rel)) {
			return filepath.SkipDir
		}
		names, ok, err := packageNames(path)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if ok {
			api[rel] = names
		}
		return nil
	})
	return api, err
}

// packageNames returns the public names of the package in dir; ok is false when dir holds no
// importable Go package (no Go files, or a main package).
func packageNames(dir string) (names []string, ok bool, err error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		if _, none := err.(*build.NoGoError); none {
			return nil, false, nil
		}
		return nil, false, err
	}
	if bp.Name == "main" {
		return nil, false, nil
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, f := range bp.GoFiles {
		file, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, false, err
		}
		for _, n := range fileNames(file) {
			seen[n] = true
		}
	}
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, true, nil
}

// fileNames returns a file's exported top-level identifiers, and its exported methods of exported
// types as "Type.Method". An interface's methods and a struct's fields are not counted: they are
// read with their type.
func fileNames(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			if recv := recvName(d.Recv); ast.IsExported(recv) {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					names = append(names, s.Name.Name)
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							names = append(names, id.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// recvName returns the name of a method's receiver type, without a pointer or type parameters.
func recvName(r *ast.FieldList) string {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch t := typ.(type) {
	case *ast.IndexExpr:
		typ = t.X
	case *ast.IndexListExpr:
		typ = t.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
