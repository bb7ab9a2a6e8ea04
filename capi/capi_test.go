package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildABI builds libgorun.so and the gorun launcher into dir.
func buildABI(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the C ABI test needs a C compiler")
	}
	for _, args := range [][]string{
		{"build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libgorun.so"), "."},
		{"build", "-o", filepath.Join(dir, "gorun"), "../cmd/gorun"},
	} {
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The hand-written include/gorun.h must agree with what the library
// exports: a C program compiled against the header alone (never against
// cgo's generated one) links and runs every call on a real 3-rank job.
func TestCProgramAgainstHeader(t *testing.T) {
	dir := t.TempDir()
	buildABI(t, dir)
	bin := filepath.Join(dir, "abi_check")
	cc := exec.Command("gcc", "-std=c11", "-Wall", "-Werror", "-I../include", "-o", bin, "testdata/abi_check.c",
		"-L"+dir, "-lgorun", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("compiling against include/gorun.h: %v\n%s", err, out)
	}
	for _, transport := range []string{"shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-np", "3", "--transport", transport, bin)
			run.Env = append(os.Environ(), "GORUN_TIMEOUT=30s")
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("gorun -np 3 abi_check: %v\n%s", err, out)
			}
			for r := 0; r < 3; r++ {
				if !strings.Contains(string(out), "abi_check: rank "+string(rune('0'+r))+" ok") {
					t.Fatalf("rank %d did not report ok:\n%s", r, out)
				}
			}
		})
	}
}

// gorun_init outside a job fails with a code and a message, not a crash.
func TestInitOutsideJobIsAnError(t *testing.T) {
	dir := t.TempDir()
	buildABI(t, dir)
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
	if out, err := exec.Command("gcc", "-I../include", "-o", bin, src, "-L"+dir, "-lgorun", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GORUN_TIMEOUT=5s", "GORUN_SIZE=2", "GORUN_RANK=1", "GORUN_SEEDS=127.0.0.1:1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun_init in a job that cannot form: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "msg=") || strings.Contains(string(out), "msg=\n") {
		t.Fatalf("no error message: %s", out)
	}
}
