//go:build cgo

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// abiDir holds the one libgorun.so and gorun launcher the tests share
// (buildABI); TestMain makes and removes it.
var abiDir string

var (
	abiOnce sync.Once
	abiErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gorun-capi-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	abiDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildABI puts libgorun.so and the gorun launcher in dir. They are built
// once per test binary (a c-shared link takes 10-30 s on 2 loaded CPUs,
// and nine tests need them) and linked into each test's dir, which the
// test's C programs then name in -L and their rpath.
func buildABI(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the C ABI test needs a C compiler")
	}
	abiOnce.Do(func() {
		for _, args := range [][]string{
			{"build", "-buildmode=c-shared", "-o", filepath.Join(abiDir, "libgorun.so"), "."},
			{"build", "-o", filepath.Join(abiDir, "gorun"), "../cmd/gorun"},
		} {
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				abiErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if abiErr != nil {
		t.Fatal(abiErr)
	}
	for _, name := range []string{"libgorun.so", "gorun"} {
		if err := os.Link(filepath.Join(abiDir, name), filepath.Join(dir, name)); err != nil {
			t.Fatalf("linking the shared %s into the test's directory: %v", name, err)
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

// gorun_launched says whether a launcher's variables were in the
// environment the process started with, the one gorun_init reads: set
// there it is 1; a variable the program sets itself (as a script started
// by torch.multiprocessing.spawn sets RANK and WORLD_SIZE) leaves it 0,
// and gorun_init then joins a job of one rank.
func TestLaunchedReadsStartEnvironment(t *testing.T) {
	dir := t.TempDir()
	buildABI(t, dir)
	src := filepath.Join(dir, "launched.c")
	os.WriteFile(src, []byte(`#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include "gorun.h"
int main(void) {
	int before = gorun_launched();
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "2", 1);
	setenv("GORUN_SIZE", "2", 1);
	printf("launched=%d after_setenv=%d\n", before, gorun_launched());
	return 0;
}
`), 0o644)
	bin := filepath.Join(dir, "launched")
	if out, err := exec.Command("gcc", "-std=c11", "-Wall", "-Werror", "-I../include", "-o", bin, src, "-L"+dir, "-lgorun", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "launched=0 after_setenv=0"},
		{[]string{"GORUN_SIZE=2", "GORUN_RANK=1"}, "launched=1 after_setenv=1"},
		{[]string{"RANK=1", "WORLD_SIZE=2"}, "launched=1 after_setenv=1"}, // torchrun's
	} {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("environment %q: %v: %q, want %q", c.env, err, out, c.want)
		}
	}
}
