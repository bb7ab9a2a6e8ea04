//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/build-capi.sh writes libgorun.so and gorun.pc; a program linked
// with pkg-config's flags alone runs without LD_LIBRARY_PATH, and the build
// leaves no header beside the library.
func TestPkgConfigNeedsNoLibraryPath(t *testing.T) {
	for _, tool := range []string{"gcc", "pkg-config", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib dir") // a space: the flags must survive it or fail loudly
	if out, err := exec.Command("bash", "../scripts/build-capi.sh", lib).CombinedOutput(); err != nil {
		t.Fatalf("build-capi.sh: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(lib, "libgorun.h")); err == nil {
		t.Errorf("build-capi.sh left cgo's libgorun.h beside the library")
	}
	lib = filepath.Join(dir, "lib")
	if out, err := exec.Command("bash", "../scripts/build-capi.sh", lib).CombinedOutput(); err != nil {
		t.Fatalf("build-capi.sh: %v\n%s", err, out)
	}
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", filepath.Join(lib, "gorun.pc")).Output()
	if err != nil {
		t.Fatalf("pkg-config: %v", err)
	}
	src := filepath.Join(dir, "noinit.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include "gorun.h"
int main(void) {
	gorun_comm c;
	int rc = gorun_init(&c);
	printf("rc=%d msg=%s\n", rc, gorun_last_error());
	return rc == GORUN_ERR_INIT ? 0 : 1;
}
`), 0o644)
	bin := filepath.Join(dir, "noinit")
	args := append([]string{"-o", bin, src}, strings.Fields(string(flags))...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GORUN_TIMEOUT=5s", "GORUN_SIZE=2", "GORUN_RANK=1", "GORUN_SEEDS=127.0.0.1:1"}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "msg=") {
		t.Fatalf("program linked through gorun.pc, run without LD_LIBRARY_PATH: %v\n%s", err, out)
	}
}

// What builds leave in the tree is ignored: the README's and the Python
// package's libraries and headers, build/, test binaries.
func TestGitignoreCoversBuildOutputs(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found")
	}
	if err := exec.Command("git", "-C", "..", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	paths := []string{"libgorun.so", "libgorun.h", "capi/libgorun.so", "capi/libgorun.h",
		"build/capi/libgorun.so", "build/capi/gorun.pc", "build/libgorun.so.lock", "capi/capi.test",
		"gorun", "python/gorun/__pycache__/x.pyc"}
	out, _ := exec.Command("git", append([]string{"-C", "..", "check-ignore", "--no-index"}, paths...)...).Output()
	ignored := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		ignored[p] = true
	}
	for _, p := range paths {
		if !ignored[p] {
			t.Errorf("%s, which a build leaves, is not in .gitignore", p)
		}
	}
}
