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

// TestCMPISet runs testdata/mpi_check.c, compiled against include/gorun.h,
// on a real 3-rank job: the rooted collectives, all-to-all, scans,
// send/recv, v-collectives, integer and value-index ops, the non-blocking
// forms and a counts disagreement.
func TestCMPISet(t *testing.T) {
	dir := t.TempDir()
	buildABI(t, dir)
	bin := filepath.Join(dir, "mpi_check")
	cc := exec.Command("gcc", "-std=c11", "-Wall", "-Werror", "-I../include", "-o", bin, "testdata/mpi_check.c",
		"-L"+dir, "-lgorun", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("compiling against include/gorun.h: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-np", "3", bin)
	run.Env = append(os.Environ(), "GORUN_TIMEOUT=30s")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun -np 3 mpi_check: %v\n%s", err, out)
	}
	for r := range 3 {
		if !strings.Contains(string(out), fmt.Sprintf("mpi_check: rank %d ok", r)) {
			t.Fatalf("rank %d did not report ok:\n%s", r, out)
		}
	}
	t.Logf("%s", out)
}
