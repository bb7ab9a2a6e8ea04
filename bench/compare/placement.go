package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The host moves this machine's two vCPUs between a near placement and far
// ones on its own, and shared-memory latencies follow by 3x or more. Every
// scenario therefore records the round trip of progs/pingpong.c (two
// threads pinned to CPUs 0 and 1) at its start and end, next to its
// figures. Seen so far: ~25 ns near and ~170 ns far on a Xeon host, ~90 ns
// and ~430 ns on an EPYC one (another host under the same name).

// nearNs is the round trip below which the placement is called near; the
// figure itself is always printed.
const nearNs = 130

// placement is one probe: the cache-line round trip of the probe's fastest
// batch (a loaded machine preempts the others), 0 if unknown.
type placement struct{ ns float64 }

func (p placement) String() string {
	switch {
	case p.ns <= 0:
		return "unknown"
	case p.ns < nearNs:
		return fmt.Sprintf("%.0f ns (near)", p.ns)
	}
	return fmt.Sprintf("%.0f ns (far)", p.ns)
}

// prober runs the compiled probe; a nil prober (no C compiler, or fewer
// than two CPUs) reports unknown.
type prober struct{ bin string }

func buildProber(ctx context.Context, work string) *prober {
	if runtime.NumCPU() < 2 {
		return nil
	}
	src, _ := filepath.Abs("bench/compare/progs/pingpong.c")
	bin := filepath.Join(work, "pingpong")
	if out, err := exec.CommandContext(ctx, "cc", "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "vCPU placement not measured: cc: %v\n%s", err, out)
		return nil
	}
	return &prober{bin: bin}
}

func (p *prober) probe(ctx context.Context) placement {
	if p == nil {
		return placement{}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.bin).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vCPU placement probe: %v\n", err)
		return placement{}
	}
	f := strings.Fields(string(out)) // rtt_ns FASTEST median_ns MEDIAN
	if len(f) < 2 || f[0] != "rtt_ns" {
		return placement{}
	}
	ns, _ := strconv.ParseFloat(f[1], 64)
	return placement{ns: ns}
}
