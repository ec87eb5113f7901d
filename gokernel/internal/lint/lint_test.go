// Package lint holds repository rules that run as tests: the direction of
// imports between kernel packages, and calls banned outside tests.
package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/lance-segmerge/lance-segmerge/"

// allowed lists, for each kernel package, the kernel packages it may
// import. Imports only go down the data flow:
// errkind ← storage ← lancefile ← ivf ← segment, and table ← segment.
var allowed = map[string][]string{
	"gokernel/errkind":   {},
	"gokernel/storage":   {"gokernel/errkind"},
	"gokernel/lancefile": {"gokernel/errkind", "gokernel/storage", "gokernel/internal/pb", "gokernel/internal/bufpool"},
	"gokernel/table":     {"gokernel/errkind", "gokernel/storage", "gokernel/internal/pb", "gokernel/lancefile"},
	"gokernel/vecmath":   {},
	"gokernel/fold":      {},
	"gokernel/ivf":       {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/internal/pb", "gokernel/internal/bufpool", "gokernel/vecmath"},
	"gokernel/hnsw":      {"gokernel/errkind", "gokernel/lancefile", "gokernel/vecmath"},
	"gokernel/policy":    {"gokernel/errkind"},
	"gokernel/journal":   {"gokernel/errkind", "gokernel/storage", "gokernel/table"},
	"gokernel/keysort":   {"gokernel/errkind", "gokernel/lancefile", "gokernel/internal/kway"},
	"gokernel/btree":     {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table", "gokernel/internal/pb", "gokernel/keysort", "gokernel/internal/rowset", "gokernel/internal/bufpool", "gokernel/internal/radix", "gokernel/internal/parallel"},
	"gokernel/bitmap":    {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table", "gokernel/internal/pb", "gokernel/keysort", "gokernel/internal/rowset", "gokernel/internal/radix", "gokernel/internal/parallel", "gokernel/internal/recent"},
	"gokernel/zonemap":   {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table", "gokernel/internal/pb", "gokernel/bitmap", "gokernel/internal/parallel"},
	"gokernel/ngram":     {"gokernel/errkind", "gokernel/fold", "gokernel/storage", "gokernel/lancefile", "gokernel/table", "gokernel/internal/pb", "gokernel/internal/kway", "gokernel/keysort", "gokernel/internal/parallel"},
	"gokernel/fts":       {"gokernel/errkind", "gokernel/fold", "gokernel/storage", "gokernel/lancefile", "gokernel/table", "gokernel/internal/pb", "gokernel/internal/parallel"},
	"gokernel/fragreuse": {"gokernel/errkind", "gokernel/storage", "gokernel/table", "gokernel/internal/pb", "gokernel/internal/recent"},
	"gokernel/segment": {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table",
		"gokernel/ivf", "gokernel/internal/pb", "gokernel/internal/bufpool", "gokernel/vecmath",
		"gokernel/encode", "gokernel/vecdata", "gokernel/hnsw", "gokernel/policy", "gokernel/journal", "gokernel/btree", "gokernel/zonemap", "gokernel/bitmap", "gokernel/ngram", "gokernel/fts", "gokernel/keysort", "gokernel/fragreuse",
		"gokernel/internal/parallel"},
	"gokernel/train":  {"gokernel/errkind", "gokernel/encode", "gokernel/ivf", "gokernel/vecdata", "gokernel/vecmath"},
	"gokernel/encode": {"gokernel/errkind", "gokernel/ivf", "gokernel/lancefile", "gokernel/vecmath"},
	"gokernel/modelio": {"gokernel/errkind", "gokernel/encode", "gokernel/ivf", "gokernel/lancefile",
		"gokernel/storage", "gokernel/table", "gokernel/internal/pb", "gokernel/vecmath"},
	"gokernel/vecdata": {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table",
		"gokernel/internal/pb", "gokernel/vecmath"},
	"gokernel/internal/s3test":    {},
	"gokernel/internal/cloudtest": {},
	"gokernel/internal/bufpool":   {},
	"gokernel/internal/rowset":    {},
	"gokernel/internal/radix":     {},
	"gokernel/internal/parallel":  {},
	"gokernel/internal/recent":    {},
	"gokernel/storage/faulty":     {"gokernel/errkind", "gokernel/storage"},
	"gokernel/search":             {"gokernel/errkind", "gokernel/encode", "gokernel/ivf", "gokernel/lancefile", "gokernel/vecmath"},
	"gokernel/verify": {"gokernel/errkind", "gokernel/storage", "gokernel/lancefile", "gokernel/table",
		"gokernel/ivf", "gokernel/internal/pb", "gokernel/vecmath", "gokernel/encode", "gokernel/vecdata",
		"gokernel/modelio", "gokernel/search", "gokernel/segment", "gokernel/btree", "gokernel/zonemap", "gokernel/bitmap", "gokernel/ngram", "gokernel/fts",
		"gokernel/fragreuse"},
}

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

type goFile struct {
	pkg  string // relative dir, e.g. "gokernel/table"
	path string
	test bool
	ast  *ast.File
}

func kernelFiles(t *testing.T) []goFile {
	root := repoRoot(t)
	var out []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "gokernel"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		full, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		out = append(out, goFile{pkg: filepath.ToSlash(rel), path: p, test: strings.HasSuffix(p, "_test.go"), ast: full})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportDirection(t *testing.T) {
	for _, f := range kernelFiles(t) {
		rules, ok := allowed[f.pkg]
		if !ok || f.test {
			continue
		}
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(path, module) {
				continue
			}
			dep := strings.TrimPrefix(path, module)
			ok := false
			for _, a := range rules {
				if dep == a || strings.HasPrefix(dep, a+"/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s: not allowed for package %s (allowed: %v)", f.path, dep, f.pkg, rules)
			}
		}
	}
}

// TestNoWholeFileReads bans os.ReadFile and io.ReadAll outside tests: the
// kernel reads footers and ranges, never whole files.
func TestNoWholeFileReads(t *testing.T) {
	for _, f := range kernelFiles(t) {
		if f.test {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok {
				name := id.Name + "." + sel.Sel.Name
				if name == "os.ReadFile" || name == "io.ReadAll" || name == "ioutil.ReadFile" || name == "ioutil.ReadAll" {
					t.Errorf("%s uses %s", f.path, name)
				}
			}
			return true
		})
	}
}

// TestRawAtomics bans atomic.AddInt64 and friends on bare integers: use the
// atomic.Int64 types.
func TestRawAtomics(t *testing.T) {
	for _, f := range kernelFiles(t) {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "atomic" {
				switch {
				case strings.HasPrefix(sel.Sel.Name, "Add"), strings.HasPrefix(sel.Sel.Name, "Load"),
					strings.HasPrefix(sel.Sel.Name, "Store"), strings.HasPrefix(sel.Sel.Name, "CompareAndSwap"):
					t.Errorf("%s uses atomic.%s on a bare value; use atomic.Int64 and friends", f.path, sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// pure lists the kernel packages that hold pure functions (no I/O, no
// clock, no goroutines of their own) and the standard library packages
// they may import.
var pure = map[string][]string{
	"gokernel/policy": {"cmp", "fmt", "math", "slices", "sort", "strings"},
}

// TestPurePackagesDoNoIO: the merge policy decides from sizes alone, so
// that it can be tested (and reasoned about) without a store.
func TestPurePackagesDoNoIO(t *testing.T) {
	for _, f := range kernelFiles(t) {
		std, ok := pure[f.pkg]
		if !ok || f.test {
			continue
		}
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				continue // the kernel rules are TestImportDirection's
			}
			ok := false
			for _, a := range std {
				ok = ok || path == a
			}
			if !ok {
				t.Errorf("%s imports %s: package %s is pure (allowed: %v)", f.path, path, f.pkg, std)
			}
		}
	}
}
