//go:build cgo

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCProgram compiles testdata/name.c against include/gorun.h and runs
// it on a real job of np ranks, with GORUN_TIMEOUT=30s and then env;
// every rank must print "name: rank R ok" within 2 minutes.
func runCProgram(t *testing.T, name string, np int, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	buildABI(t, dir)
	bin := filepath.Join(dir, name)
	cc := exec.Command("gcc", "-std=c11", "-Wall", "-Werror", "-I../include", "-o", bin, "testdata/"+name+".c",
		"-L"+dir, "-lgorun", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("compiling against include/gorun.h: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-np", fmt.Sprint(np), bin)
	run.Env = append(append(os.Environ(), "GORUN_TIMEOUT=30s"), env...)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun -np %d %s: %v\n%s", np, name, err, out)
	}
	for r := range np {
		if !strings.Contains(string(out), fmt.Sprintf("%s: rank %d ok", name, r)) {
			t.Fatalf("rank %d did not report ok:\n%s", r, out)
		}
	}
	return string(out)
}

// TestCArguments runs testdata/args_check.c on 2 ranks: a call's own bad
// argument is GORUN_ERR_INVALID, from gorun_wait, gorun_test and the calls
// after it (it aborts the communicator) too; every entry point refuses a
// NULL buffer with a non-zero count that it uses on this rank, and
// accepts one it ignores; and a count too large for any buffer (SIZE_MAX,
// a product that overflows, over 2^47 bytes) is refused naming the count.
// Each refusal aborts its communicator.
func TestCArguments(t *testing.T) {
	runCProgram(t, "args_check", 2)
}

// TestCRefusalFailsEveryRank runs testdata/refuse_check.c on 3 ranks with
// GORUN_TIMEOUT=10m: where one rank's argument is refused before the call
// starts (a dtype or op number, a NULL buffer or request, a count out of
// range, in blocking, non-blocking, point-to-point and create_group
// calls, and gorun_refuse), every rank fails within seconds,
// GORUN_ERR_PEER naming that rank on the others. They used to wait for it
// in the call until GORUN_TIMEOUT, and the test's 2 minutes ran out.
func TestCRefusalFailsEveryRank(t *testing.T) {
	t.Logf("%s", runCProgram(t, "refuse_check", 3, "GORUN_TIMEOUT=10m"))
}

// TestCCreateGroup runs testdata/group_check.c on 4 ranks:
// gorun_comm_create_group refuses its own bad arguments, aborting the
// communicator it was called on;
// the even and the odd ranks each make a group at once, listed from the
// highest rank down, with tags of their own, and an allreduce, broadcast
// and allgather on each give their members' values in group-rank order;
// the world communicator goes on after.
func TestCCreateGroup(t *testing.T) {
	runCProgram(t, "group_check", 4)
}
