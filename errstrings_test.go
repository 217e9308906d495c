package pace_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestErrorStrings checks the convention for error strings in the non-test
// Go files of every library package of the repository, nested modules
// included (it reads the files, so it needs none of their dependencies):
//
//   - the format of every errors.New and fmt.Errorf starts with the
//     package's name and ": " (a wrapped error comes last: "pkg: what: %w"),
//     and every literal in it is ASCII;
//   - the literal format given to a helper of the package that builds such
//     an error from it (invalid, invalidf, ...) is ASCII and does not repeat
//     the package's name, which the helper adds;
//   - no argument of those calls is a key (a variable named key, k or keys),
//     since keys come from clients;
//   - the string fields of a composite literal of a type named ...Error are
//     ASCII.
//
// Commands (package main) and directories named testdata are skipped.
func TestErrorStrings(t *testing.T) {
	pkgs := map[string][]*ast.File{} // by directory
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		if f.Name.Name != "main" {
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages; want every library package of the repository", len(pkgs))
	}
	checked := 0
	for _, files := range pkgs {
		checked += checkErrorStrings(t, fset, files)
	}
	if checked < 50 {
		t.Errorf("checked %d error constructors; the scan finds too few to be looking at the right calls", checked)
	}
}

// checkErrorStrings checks the files of one package, and returns the number
// of error constructors it looked at.
func checkErrorStrings(t *testing.T, fset *token.FileSet, files []*ast.File) int {
	t.Helper()
	pkg := files[0].Name.Name
	if pkg == "errs" {
		pkg = "pace" // internal/errs holds package pace's sentinels
	}
	helpers := errorHelpers(files)
	checked := 0
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				name, direct := errorCall(n)
				_, helper := helpers[name]
				if !direct && !helper || len(n.Args) == 0 {
					return true
				}
				checked++
				at := fset.Position(n.Pos())
				lits, ok := literals(n.Args[0])
				switch {
				case !ok || len(lits) == 0:
					t.Errorf("%s: %s with a format that is not a string literal", at, name)
				case direct && !strings.HasPrefix(lits[0], pkg+": "):
					t.Errorf("%s: %s(%q): want the format to start with %q", at, name, lits[0], pkg+": ")
				case helper && strings.HasPrefix(lits[0], pkg+": "):
					t.Errorf("%s: %s(%q): the helper adds %q already", at, name, lits[0], pkg+": ")
				}
				for _, l := range lits {
					if !ascii(l) {
						t.Errorf("%s: %s(%q): not ASCII", at, name, l)
					}
				}
				for _, a := range n.Args[1:] {
					if isKey(a) {
						t.Errorf("%s: %s formats a key: an error must never contain one", at, name)
					}
				}
			case *ast.CompositeLit:
				if id, ok := typeName(n.Type); ok && strings.HasSuffix(id, "Error") {
					for _, e := range n.Elts {
						v := e
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							v = kv.Value
						}
						if lits, ok := literals(v); ok {
							for _, l := range lits {
								if !ascii(l) {
									t.Errorf("%s: %s{%q}: not ASCII", fset.Position(v.Pos()), id, l)
								}
							}
						}
					}
				}
			}
			return true
		})
	}
	return checked
}

// errorCall returns the name of the function n calls, and whether it is
// errors.New or fmt.Errorf.
func errorCall(n *ast.CallExpr) (name string, direct bool) {
	switch fn := n.Fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok {
			name = x.Name + "." + fn.Sel.Name
			return name, name == "errors.New" || name == "fmt.Errorf"
		}
	case *ast.Ident:
		return fn.Name, false
	}
	return "", false
}

// errorHelpers returns the functions of a package that pass one of their
// parameters into the format of an fmt.Errorf: the helpers that add the
// package's prefix to a format of their caller's.
func errorHelpers(files []*ast.File) map[string]struct{} {
	helpers := map[string]struct{}{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil {
				continue
			}
			params := map[string]bool{}
			for _, fl := range fd.Type.Params.List {
				for _, n := range fl.Names {
					params[n.Name] = true
				}
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok || len(c.Args) == 0 {
					return true
				}
				if name, direct := errorCall(c); !direct || name != "fmt.Errorf" {
					return true
				}
				ast.Inspect(c.Args[0], func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok && params[id.Name] {
						helpers[fd.Name.Name] = struct{}{}
					}
					return true
				})
				return true
			})
		}
	}
	return helpers
}

// literals returns the string literals of e, a literal or a concatenation,
// leftmost first; ok is false when e holds anything else but identifiers
// (a format parameter, in a helper).
func literals(e ast.Expr) (lits []string, ok bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return nil, false
		}
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err == nil
	case *ast.BinaryExpr:
		l, okl := literals(e.X)
		r, okr := literals(e.Y)
		return append(l, r...), okl && okr
	case *ast.Ident:
		return nil, true
	case *ast.ParenExpr:
		return literals(e.X)
	}
	return nil, false
}

// isKey reports whether e names a key: an identifier or a field called key
// or k, or an element of keys (len(key) is a number, not a key).
func isKey(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "key" || e.Name == "k"
	case *ast.SelectorExpr:
		return e.Sel.Name == "key" || e.Sel.Name == "Key"
	case *ast.IndexExpr:
		if id, ok := e.X.(*ast.Ident); ok && id.Name == "keys" {
			return true
		}
	}
	return false
}

func typeName(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name, true
	case *ast.SelectorExpr:
		return e.Sel.Name, true
	}
	return "", false
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
