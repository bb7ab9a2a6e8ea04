package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// abiFunctions are the functions include/gorun.h declares.
func abiFunctions(t *testing.T) []string {
	t.Helper()
	h, err := os.ReadFile("../include/gorun.h")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`).ReplaceAllString(string(h), "")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^[A-Za-z][\w \t*]*?\b(gorun_\w+)\s*\(`).FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("include/gorun.h declares %d functions: %v", len(names), names)
	}
	return names
}

// TestGorunLibIncompatible: GORUN_LIB naming a libgorun.so built before
// a function was added to the C ABI (here one of every function of
// gorun.h but gorun_launched, which the package calls, and
// gorun_trace_span, which only the torch extension calls), or naming no
// file, fails init_process_group("gorun") and gorun.init() on every rank
// with an error that names GORUN_LIB's library, each missing function,
// and the fix: build it from this checkout, or unset GORUN_LIB. The
// package said only "AttributeError: ...: undefined symbol:
// gorun_launched"; a library lacking only an extension's function failed
// the extension's load, naming the extension.
func TestGorunLibIncompatible(t *testing.T) {
	need(t, "torch")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build a stand-in library")
	}
	dir := t.TempDir()
	var src strings.Builder
	for _, f := range abiFunctions(t) {
		if f != "gorun_launched" && f != "gorun_trace_span" {
			src.WriteString("int " + f + "(void) { return 0; }\n")
		}
	}
	old := filepath.Join(dir, "old", "libgorun.so")
	os.Mkdir(filepath.Dir(old), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "old.c"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", old, filepath.Join(dir, "old.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	none := filepath.Join(dir, "none", "libgorun.so")
	const (
		torchInit = "import torch.distributed as dist, gorun.torch_backend; dist.init_process_group('gorun')"
		pkgInit   = "import gorun; gorun.init()"
	)
	for _, c := range []struct {
		lib, script string
		want        []string
	}{
		{old, torchInit, []string{"gorun_launched, gorun_trace_span (declared in include/gorun.h)", "built from an older gorun"}},
		{old, pkgInit, []string{"gorun_launched, gorun_trace_span (declared in include/gorun.h)"}},
		{none, pkgInit, []string{"No such file"}},
	} {
		out, err := gorunRun(t, []string{"GORUN_LIB=" + c.lib, "PYTHONPATH=python"}, 2, python, "-c", c.script)
		if err == nil {
			t.Fatalf("GORUN_LIB=%s: %s succeeded:\n%s", c.lib, c.script, out)
		}
		want := append(c.want, "ImportError: gorun: cannot use GORUN_LIB="+c.lib+": ",
			"build it from this checkout (cd ", "go build -buildmode=c-shared -o "+c.lib+" ./capi)",
			"or unset GORUN_LIB")
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("GORUN_LIB=%s, %s: the error does not say %q:\n%s", c.lib, c.script, w, out)
			}
		}
	}
}
