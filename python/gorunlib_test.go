package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// headerABIVersion is include/gorun.h's GORUN_ABI_VERSION.
func headerABIVersion(t *testing.T) int {
	t.Helper()
	h, err := os.ReadFile("../include/gorun.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define GORUN_ABI_VERSION (\d+)$`).FindSubmatch(h)
	if m == nil {
		t.Fatal("include/gorun.h has no line #define GORUN_ABI_VERSION N")
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

// TestPythonABIVersion: the package's ABI_VERSION, the C ABI version its
// calls were written for, is gorun.h's (capi's TestABIVersion makes the
// header's grow with every change to its declarations).
func TestPythonABIVersion(t *testing.T) {
	py, err := os.ReadFile("gorun/_lib.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ABI_VERSION = (\d+)$`).FindSubmatch(py)
	if m == nil {
		t.Fatal("python/gorun/_lib.py has no line ABI_VERSION = N")
	}
	if v, h := string(m[1]), headerABIVersion(t); v != strconv.Itoa(h) {
		t.Errorf("python/gorun/_lib.py's ABI_VERSION is %s, include/gorun.h's GORUN_ABI_VERSION %d", v, h)
	}
}

// TestGorunLibIncompatible: GORUN_LIB naming a libgorun.so built before
// a function was added to the C ABI (here one of every function of
// gorun.h but gorun_abi_version and gorun_launched, which the package
// calls, and gorun_trace_span, which only the torch extension calls), or
// one of another ABI version (every function, with gorun_abi_version
// returning the header's version plus or minus one), or naming no file,
// fails init_process_group("gorun") and gorun.init() on every rank with
// an error that names GORUN_LIB's library, each missing function or both
// versions, and the fix: build it from this checkout, or unset
// GORUN_LIB. The package said only "AttributeError: ...: undefined
// symbol: gorun_launched"; a library lacking only an extension's
// function failed the extension's load, naming the extension; and one
// whose functions took other arguments was called with the wrong ones.
func TestGorunLibIncompatible(t *testing.T) {
	need(t, "torch")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build a stand-in library")
	}
	dir := t.TempDir()
	// standIn builds a library of name with every function of gorun.h
	// but those in lacks, each returning 0, and gorun_abi_version version.
	standIn := func(name string, version int, lacks ...string) string {
		var src strings.Builder
		for _, f := range abiFunctions(t) {
			switch {
			case slices.Contains(lacks, f):
			case f == "gorun_abi_version":
				src.WriteString("int " + f + "(void) { return " + strconv.Itoa(version) + "; }\n")
			default:
				src.WriteString("int " + f + "(void) { return 0; }\n")
			}
		}
		lib := filepath.Join(dir, name, "libgorun.so")
		os.Mkdir(filepath.Dir(lib), 0o755)
		c := filepath.Join(dir, name+".c")
		if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, c).CombinedOutput(); err != nil {
			t.Fatalf("cc: %v\n%s", err, out)
		}
		return lib
	}
	v := headerABIVersion(t)
	old := standIn("old", 0, "gorun_abi_version", "gorun_launched", "gorun_trace_span")
	newer := standIn("newer", v+1)
	older := standIn("older", v-1)
	none := filepath.Join(dir, "none", "libgorun.so")
	versions := func(lib int, built string) []string {
		return []string{"it has gorun's C ABI version " + strconv.Itoa(lib) + " (gorun_abi_version()), and this package " +
			"was written for version " + strconv.Itoa(v) + " (GORUN_ABI_VERSION in include/gorun.h), so it was built " +
			"from " + built + " gorun than this package"}
	}
	const (
		torchInit = "import torch.distributed as dist, gorun.torch_backend; dist.init_process_group('gorun')"
		pkgInit   = "import gorun; gorun.init()"
	)
	for _, c := range []struct {
		lib, script string
		want        []string
	}{
		{old, torchInit, []string{"gorun_abi_version, gorun_launched, gorun_trace_span (declared in include/gorun.h)", "built from an older gorun"}},
		{old, pkgInit, []string{"gorun_abi_version, gorun_launched, gorun_trace_span (declared in include/gorun.h)"}},
		{newer, torchInit, versions(v+1, "a newer")},
		{newer, pkgInit, versions(v+1, "a newer")},
		{older, pkgInit, versions(v-1, "an older")},
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
