//go:build linux

package launcher

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// gorun -np 2 --elastic --max-np 3 of examples/soak -elastic; once it
// runs, gorun --add-ranks 1 (AddRanks) starts rank 2, which the two admit
// with Comm.Grow: all three end as ranks of 3 and the job exits 0. A
// second request does not fit under --max-np and is refused; a job id
// nobody runs is an error.
func TestAddRanksGrowsRunningJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs examples/soak")
	}
	// Built here, not by Run: runJob's minute covers the job, and a cold
	// non-race build of the module on a loaded 2-CPU machine took most of it.
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	soak, err := buildPackage(bctx, "../examples/soak", t.TempDir())
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan struct{})
	watch := &watchWriter{want: "--add-ranks N --job ", seen: func() { close(seen) }}
	type result struct {
		first, second []int
		err2          error
	}
	got := make(chan result, 1)
	go func() {
		var r result
		defer func() { got <- r }()
		select {
		case <-seen:
		case <-time.After(60 * time.Second):
			return
		}
		m := regexp.MustCompile(`--add-ranks N --job (\S+)`).FindStringSubmatch(watch.String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if r.first, err = AddRanks(ctx, m[1], 1); err != nil {
			t.Errorf("AddRanks: %v", err)
		}
		r.second, r.err2 = AddRanks(ctx, m[1], 1)
	}()
	out, _, err := runJob(t, "", Config{NP: 2, Program: soak, Args: []string{"-elastic", "-duration", "6s"},
		Elastic: true, MaxNP: 3, Timeout: 90 * time.Second, Stderr: watch})
	stderr := watch.String()
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	r := <-got
	if len(r.first) != 1 || r.first[0] != 2 {
		t.Fatalf("AddRanks started %v, want [2]\nstderr:\n%s", r.first, stderr)
	}
	if r.err2 == nil || !strings.Contains(r.err2.Error(), "--max-np 3") {
		t.Errorf("a second AddRanks beyond --max-np: %v, %v; want an error naming --max-np", r.second, r.err2)
	}
	for _, want := range []string{"soak: rank 0 of 3:", "soak: rank 1 of 3:", "soak: rank 2 of 3:"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output:\n%s\nstderr:\n%s", want, out, stderr)
		}
	}
	if _, err := AddRanks(context.Background(), "gorun-no-such-job", 1); err == nil {
		t.Error("AddRanks to a job nobody runs succeeded")
	}
}
