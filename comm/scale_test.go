package comm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScale is the README's scale table: n ranks in one process on the mem
// provider form a communicator and run allreduce (8 B and 64 Ki floats),
// broadcast, barrier and allgather, checking the results. Each size runs in
// a child process of its own, so that its peak RSS (VmHWM) is its own. It
// runs only with GORUN_SCALE set to the sizes (e.g. 64,128,256,512,1024):
//
//	GORUN_SCALE=64,128,256,512,1024 go test -run TestScale -v -timeout 30m ./comm/
func TestScale(t *testing.T) {
	if n := os.Getenv("GORUN_SCALE_CHILD"); n != "" {
		scaleChild(t, n)
		return
	}
	sizes := os.Getenv("GORUN_SCALE")
	if sizes == "" {
		t.Skip("set GORUN_SCALE=64,128,... to measure (the README's scale table)")
	}
	t.Logf("| ranks | time | peak RSS | RSS per rank | formed (NewLocal's estimate, localWorldBytes) | goroutines | connections per rank (mean, max) |")
	t.Logf("|---|---|---|---|---|---|---|")
	for _, s := range strings.Split(sizes, ",") {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScale$", "-test.v")
		cmd.Env = append(os.Environ(), "GORUN_SCALE_CHILD="+s)
		out, err := cmd.CombinedOutput()
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if i := strings.Index(l, "SCALE|"); i >= 0 {
				line = l[i+len("SCALE"):]
			}
		}
		if err != nil || line == "" {
			t.Errorf("%s ranks: %v\n%s", s, err, out)
			continue
		}
		t.Logf("%s", line)
	}
}

func scaleChild(t *testing.T, arg string) {
	n, err := strconv.Atoi(arg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cs, err := NewLocal(ctx, n)
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	formed := time.Since(start)
	formedHWM := vmHWM()
	cfg, err := newConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.local = true
	estimate := localWorldBytes(cfg, n)
	goroutines := runtime.NumGoroutine()
	mustAll(t, "scale", onAll(cs, func(c *Comm) error { return scaleRound(ctx, c) }))
	conns, maxConns := 0, 0
	for _, c := range cs {
		conns += c.Connections()
		maxConns = max(maxConns, c.Connections())
	}
	elapsed := time.Since(start)
	for _, c := range cs {
		c.Close()
	}
	hwm := vmHWM()
	t.Logf("SCALE| %d | %.1f s (formed in %.1f s) | %d MiB | %d KiB | %d MiB (estimate %.0f) | %d | %.1f, %d |", n, elapsed.Seconds(), formed.Seconds(),
		hwm>>20, hwm/int64(n)>>10, formedHWM>>20, estimate/(1<<20), goroutines, float64(conns)/float64(n), maxConns)
}

// scaleRound runs the table's collectives on c and checks them.
func scaleRound(ctx context.Context, c *Comm) error {
	n, r := c.Size(), c.Rank()
	small := []float64{float64(r)}
	if err := AllReduce(ctx, c, small, small, Sum); err != nil {
		return err
	}
	if want := float64(n * (n - 1) / 2); small[0] != want {
		return fmt.Errorf("8-byte allreduce: %v, want %v", small[0], want)
	}
	big := make([]float32, 64<<10)
	for i := range big {
		big[i] = float32(r%7 + i%5)
	}
	if err := AllReduce(ctx, c, big, big, Sum); err != nil {
		return err
	}
	sum7 := 0
	for q := range n {
		sum7 += q % 7
	}
	for _, i := range []int{0, 1, 4, len(big) - 1} {
		if want := float32(sum7 + n*(i%5)); big[i] != want {
			return fmt.Errorf("64 Ki-float allreduce [%d]: %v, want %v", i, big[i], want)
		}
	}
	bc := make([]int32, 1024)
	if r == n/2 {
		for i := range bc {
			bc[i] = int32(i + 1)
		}
	}
	if err := Broadcast(ctx, c, bc, n/2); err != nil {
		return err
	}
	if bc[0] != 1 || bc[1023] != 1024 {
		return fmt.Errorf("broadcast: got %d..%d", bc[0], bc[1023])
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	all := make([]int32, 2*n)
	if err := AllGather(ctx, c, []int32{int32(r), int32(-r)}, all); err != nil {
		return err
	}
	for q := range n {
		if all[2*q] != int32(q) || all[2*q+1] != int32(-q) {
			return fmt.Errorf("allgather: block %d = %v", q, all[2*q:2*q+2])
		}
	}
	return nil
}

// vmHWM is this process's peak resident set in bytes (Linux; 0 elsewhere).
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
