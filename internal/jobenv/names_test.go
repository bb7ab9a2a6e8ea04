package jobenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNamesOwnedHere: no Go file outside this package spells a GORUN_*
// variable as a string literal of its own (a name, or NAME=value; prose in
// messages may mention one); each names it through this package's
// constants. Tests, examples (programs users copy, which cannot import an
// internal package) and test harnesses are left out.
func TestNamesOwnedHere(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Test-harness variables in non-test files: they are no part of the
	// contract between the launcher and the ranks.
	harness := map[string]bool{"GORUN_RDMATEST_CHILD": true}
	name := regexp.MustCompile(`^"GORUN_[A-Z0-9_]*[A-Z0-9](=[^ ]*)?"$`)
	var bad []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "examples" || rel == "internal/jobenv" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if name.MatchString(lit.Value) && !harness[strings.Trim(lit.Value, `"`)] {
					bad = append(bad, rel+": "+lit.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("a GORUN_ name spelled outside internal/jobenv: %s", b)
	}
}
