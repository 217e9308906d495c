// Command apicheck records the exported API of every package of the
// repository in api/, one file per package (in the manner of the Go
// repository's api/ files), and checks that the record matches the code.
//
//	go run ./internal/apicheck        # check: exit 1 and a diff when the API and api/ differ
//	go run ./internal/apicheck -w     # write api/ from the code
//
// A package is every directory with non-test Go files outside internal/,
// examples/, bench/ and testdata/, whatever module it belongs to. Each line
// names one exported declaration with its signature (parameter names left
// out), so an API change always shows as a line added or removed: CI runs
// the check, and a commit that changes the API records it in api/ and in
// CHANGELOG.md.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const module = "github.com/ratepace/pace"

func main() {
	write := flag.Bool("w", false, "write api/ instead of checking it")
	flag.Parse()
	pkgs, err := collect(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(2)
	}
	if *write {
		if err := writeAll("api", pkgs); err != nil {
			fmt.Fprintln(os.Stderr, "apicheck:", err)
			os.Exit(2)
		}
		return
	}
	if diffs := check("api", pkgs); len(diffs) > 0 {
		fmt.Fprintln(os.Stderr, "apicheck: the exported API differs from its record in api/:")
		for _, d := range diffs {
			fmt.Fprintln(os.Stderr, "  "+d)
		}
		fmt.Fprintln(os.Stderr, "apicheck: if the change is deliberate, run `go run ./internal/apicheck -w` and say it in CHANGELOG.md, in the same commit")
		os.Exit(1)
	}
}

// collect returns, for each package directory under root, its API lines.
func collect(root string) (map[string][]string, error) {
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "testdata" || name == "internal" || name == "examples" || name == "bench" || name == "api") {
			return filepath.SkipDir
		}
		lines, pkgName, err := packageAPI(path)
		if err != nil {
			return err
		}
		if pkgName == "" || pkgName == "main" {
			return nil
		}
		rel := filepath.ToSlash(path)
		imp := module
		if rel != "." {
			imp += "/" + rel
		}
		pkgs[imp] = lines
		return nil
	})
	return pkgs, err
}

// packageAPI parses the non-test files of dir and returns its API lines.
func packageAPI(dir string) (lines []string, pkgName string, err error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, "", err
		}
		if hasIgnoreTag(f) {
			continue
		}
		files = append(files, f)
		pkgName = f.Name.Name
	}
	set := map[string]bool{}
	for _, f := range files {
		for _, decl := range f.Decls {
			for _, l := range declLines(fset, decl) {
				set[l] = true
			}
		}
	}
	for l := range set {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return lines, pkgName, nil
}

// hasIgnoreTag reports whether f is built only under a build tag (such as a
// test-only simulation): those files are not part of the API.
func hasIgnoreTag(f *ast.File) bool {
	for _, c := range f.Comments {
		if c.Pos() > f.Package {
			break
		}
		for _, l := range c.List {
			if strings.HasPrefix(l.Text, "//go:build") {
				return true
			}
		}
	}
	return false
}

func declLines(fset *token.FileSet, decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		sig := signature(fset, d.Type)
		if d.Recv == nil {
			return []string{"func " + d.Name.Name + sig}
		}
		recv := d.Recv.List[0].Type
		base := recv
		if s, ok := base.(*ast.StarExpr); ok {
			base = s.X
		}
		if ix, ok := base.(*ast.IndexExpr); ok {
			base = ix.X
		}
		if id, ok := base.(*ast.Ident); !ok || !id.IsExported() {
			return nil
		}
		return []string{"method (" + expr(fset, stripNames(recv)) + ") " + d.Name.Name + sig}
	case *ast.GenDecl:
		var out []string
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.ValueSpec:
				kind := d.Tok.String()
				for i, n := range s.Names {
					if !n.IsExported() {
						continue
					}
					l := kind + " " + n.Name
					if s.Type != nil {
						l += " " + expr(fset, s.Type)
					}
					if d.Tok == token.CONST && i < len(s.Values) {
						l += " = " + expr(fset, s.Values[i])
					}
					out = append(out, l)
				}
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					out = append(out, typeLines(fset, s)...)
				}
			}
		}
		return out
	}
	return nil
}

func typeLines(fset *token.FileSet, s *ast.TypeSpec) []string {
	head := "type " + s.Name.Name
	if s.TypeParams != nil {
		head += expr(fset, &ast.IndexListExpr{X: ast.NewIdent(""), Indices: fieldTypes(s.TypeParams)})
	}
	if s.Assign.IsValid() {
		head += " ="
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		out := []string{head + " struct"}
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				if id := embeddedName(f.Type); id != "" && ast.IsExported(id) {
					out = append(out, head+", embedded "+expr(fset, f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					out = append(out, head+", "+n.Name+" "+expr(fset, f.Type))
				}
			}
		}
		return out
	case *ast.InterfaceType:
		out := []string{head + " interface"}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				out = append(out, head+", embedded "+expr(fset, m.Type))
				continue
			}
			for _, n := range m.Names {
				if ft, ok := m.Type.(*ast.FuncType); ok && n.IsExported() {
					out = append(out, head+", "+n.Name+signature(fset, ft))
				}
			}
		}
		return out
	default:
		return []string{head + " " + expr(fset, stripNames(s.Type))}
	}
}

func embeddedName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	}
	return ""
}

func fieldTypes(fl *ast.FieldList) []ast.Expr {
	var out []ast.Expr
	for _, f := range fl.List {
		n := max(1, len(f.Names))
		for range n {
			out = append(out, f.Type)
		}
	}
	return out
}

// signature prints a function type without its parameter names.
func signature(fset *token.FileSet, ft *ast.FuncType) string {
	s := expr(fset, stripNames(ft))
	return strings.TrimPrefix(s, "func")
}

// stripNames returns a copy of e with the names of function parameters and
// results removed, so that renaming a parameter is not an API change.
func stripNames(e ast.Expr) ast.Expr {
	ft, ok := e.(*ast.FuncType)
	if !ok {
		return e
	}
	strip := func(fl *ast.FieldList) *ast.FieldList {
		if fl == nil {
			return nil
		}
		out := &ast.FieldList{}
		for _, f := range fl.List {
			n := max(1, len(f.Names))
			for range n {
				out.List = append(out.List, &ast.Field{Type: stripNames(f.Type)})
			}
		}
		return out
	}
	return &ast.FuncType{TypeParams: ft.TypeParams, Params: strip(ft.Params), Results: strip(ft.Results)}
}

func expr(fset *token.FileSet, e ast.Expr) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, e); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func fileName(imp string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
	if rel == "" {
		rel = "pace"
	}
	return strings.ReplaceAll(rel, "/", "_") + ".txt"
}

func render(imp string, lines []string) []byte {
	var b bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&b, "pkg %s, %s\n", imp, l)
	}
	return b.Bytes()
}

func writeAll(dir string, pkgs map[string][]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	for imp, lines := range pkgs {
		if err := os.WriteFile(filepath.Join(dir, fileName(imp)), render(imp, lines), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// check returns a line per difference between pkgs and the files in dir.
func check(dir string, pkgs map[string][]string) []string {
	var diffs []string
	want := map[string]bool{}
	for imp, lines := range pkgs {
		name := fileName(imp)
		want[name] = true
		recorded, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: not recorded (%s is missing)", imp, filepath.Join(dir, name)))
			continue
		}
		have := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(recorded)), "\n") {
			if l != "" {
				have[l] = true
			}
		}
		now := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(render(imp, lines))), "\n") {
			if l != "" {
				now[l] = true
			}
		}
		for l := range now {
			if !have[l] {
				diffs = append(diffs, "+ "+l)
			}
		}
		for l := range have {
			if !now[l] {
				diffs = append(diffs, "- "+l)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	for _, f := range files {
		if !want[filepath.Base(f)] {
			diffs = append(diffs, fmt.Sprintf("%s: records a package that no longer exists", f))
		}
	}
	sort.Strings(diffs)
	return diffs
}
