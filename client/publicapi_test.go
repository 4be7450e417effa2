package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// The client's exported API names public types only: an internal package in a signature or an
// exported field would stop a program outside the module from using it.
func TestClient_ExportedAPIUsesPublicTypesOnly(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	internal := map[string]bool{} // import names of internal packages, per file
	check := func(where string, n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
					t.Errorf("%s: %s.%s is an internal type in the exported API", where, id.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
	for _, pkg := range pkgs {
		for name, f := range pkg.Files {
			clear(internal)
			for _, imp := range f.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if strings.Contains(path, "/internal/") {
					n := path[strings.LastIndex(path, "/")+1:]
					if imp.Name != nil {
						n = imp.Name.Name
					}
					internal[n] = true
				}
			}
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
						check(name+": func "+d.Name.Name, d.Type)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						ts, ok := s.(*ast.TypeSpec)
						if !ok || !ts.Name.IsExported() {
							continue
						}
						if st, ok := ts.Type.(*ast.StructType); ok {
							for _, fld := range st.Fields.List {
								if len(fld.Names) == 0 || fld.Names[0].IsExported() {
									check(name+": "+ts.Name.Name+" field", fld.Type)
								}
							}
							continue
						}
						check(name+": type "+ts.Name.Name, ts.Type)
					}
				}
			}
		}
	}
}

func exportedRecv(r *ast.FieldList) bool {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
