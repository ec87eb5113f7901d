package pybind

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testTools are the exports that only the test suite (and people
// debugging an index file) use; see doc_testtools.go.
var testTools = []string{"InspectFile", "DescribeIVF", "WriteTestFile", "InspectHNSW", "ReadVectors", "DamageSegment"}

// TestToolsStayOutOfTheProductionExtension: every test tool is declared
// in a file compiled only with the segmerge_testtools tag, and no file
// compiled without it declares one, so the wheels (built without the tag)
// do not carry them.
func TestToolsStayOutOfTheProductionExtension(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		tagged := false
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if expr, err := constraint.Parse(c.Text); err == nil {
					tagged = expr.Eval(func(tag string) bool { return tag == "segmerge_testtools" }) &&
						!expr.Eval(func(string) bool { return false })
				}
			}
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			for _, tool := range testTools {
				if fn.Name.Name != tool {
					continue
				}
				declared[tool] = true
				if !tagged {
					t.Errorf("%s declares the test tool %s without the segmerge_testtools build tag", name, tool)
				}
			}
		}
	}
	for _, tool := range testTools {
		if !declared[tool] {
			t.Errorf("test tool %s is not declared in any tagged file (update testTools)", tool)
		}
	}
}
