package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// withHosts places NewLocal's ranks on simulated hosts: rank r on host
// hosts[r]. The world stays in one process over mem.
func withHosts(hosts ...int) Option {
	return func(c *config) error {
		c.simHosts = hosts
		c.transport = "mem"
		return nil
	}
}

// hostLayouts are the layouts the issue names: 2x2, 2x3, 3x1 and 1+3,
// plus ranks not contiguous by host.
var hostLayouts = map[string][]int{
	"2x2":        {0, 0, 1, 1},
	"2x3":        {0, 0, 0, 1, 1, 1},
	"3x1":        {0, 1, 2},
	"1+3":        {0, 1, 1, 1},
	"interleave": {0, 1, 0, 1},
}

func TestTopology(t *testing.T) {
	cs := newLocal(t, 5, withHosts(0, 1, 0, 2, 1))
	topo := cs[3].Topology()
	if want := [][]int{{0, 2}, {1, 4}, {3}}; !slices.EqualFunc(topo.Hosts, want, slices.Equal) {
		t.Fatalf("Hosts = %v, want %v", topo.Hosts, want)
	}
	if !topo.SameHost(1, 4) || topo.SameHost(0, 1) {
		t.Errorf("SameHost wrong: %v", topo.HostOf)
	}
	if cs[2].LocalRank() != 1 || cs[2].LocalSize() != 2 || cs[3].LocalSize() != 1 {
		t.Errorf("rank 2 local %d/%d, rank 3 local size %d", cs[2].LocalRank(), cs[2].LocalSize(), cs[3].LocalSize())
	}
	for r, c := range cs {
		if c.hier == nil {
			t.Fatalf("rank %d: no hierarchical communicators", r)
		}
	}
	one := newLocal(t, 3)
	if one[0].hier != nil || len(one[0].Topology().Hosts) != 1 {
		t.Errorf("one host: hier %v, topology %v", one[0].hier, one[0].Topology())
	}
}

// runAll runs f on every rank concurrently and fails on any error.
func runAll(t *testing.T, cs []*Comm, f func(c *Comm) error) {
	t.Helper()
	mustAll(t, "hierarchical", onAll(cs, f))
}

// TestHierarchicalCollectives checks every hierarchical collective against
// the values a flat computation gives, on each layout, at sizes around the
// selection threshold and with counts that do not split evenly.
// Between two even hosts the allreduce's cross-host step runs as
// hierCross2; it is checked both ways, with hierDirected off as well.
func TestHierarchicalCollectives(t *testing.T) {
	for name, layout := range hostLayouts {
		t.Run(name, func(t *testing.T) {
			cs := newLocal(t, len(layout), withHosts(layout...))
			for _, count := range hierCounts {
				runAll(t, cs, func(c *Comm) error { return checkCollectives(context.Background(), c, count) })
			}
			if cs[0].hier == nil || cs[0].hier.back == nil {
				return
			}
			defer func() { hierDirected = true }()
			hierDirected = false
			for _, count := range hierCounts {
				runAll(t, cs, func(c *Comm) error { return checkCollectives(context.Background(), c, count) })
			}
		})
	}
}

// TestHierarchicalBack: the second cross communicator exists between two
// even hosts only.
func TestHierarchicalBack(t *testing.T) {
	for name, layout := range hostLayouts {
		cs := newLocal(t, len(layout), withHosts(layout...))
		want := name == "2x2" || name == "2x3" || name == "interleave"
		for r, c := range cs {
			if c.hier != nil && (c.hier.back != nil) != want {
				t.Errorf("%s rank %d: back %v, want one: %v", name, r, c.hier.back, want)
			}
		}
	}
}

// hierCounts are element counts around the hierarchical threshold, one
// that does not split evenly, and a small one (flat).
var hierCounts = []int{hierMinBytes / 8, hierMinBytes/8 + 7, 3}

// checkCollectives runs allreduce (sum, max), broadcast from every root,
// allgather, reduce-scatter (avg) and barrier on count elements and checks
// the results; every rank calls it.
func checkCollectives(ctx context.Context, c *Comm, count int) error {
	n := c.Size()
	if err := checkAllReduceSum(ctx, c, count); err != nil {
		return err
	}
	mx := make([]int32, count)
	for i := range mx {
		mx[i] = int32((c.Rank()*7 + i) % n)
	}
	if err := AllReduce(ctx, c, mx, mx, Max); err != nil {
		return err
	}
	for i, v := range mx {
		if v != int32(n-1) && n > 1 {
			return fmt.Errorf("rank %d allreduce max: [%d] = %d", c.Rank(), i, v)
		}
	}
	if err := checkBroadcasts(ctx, c, count); err != nil {
		return err
	}
	blk := max(1, count/n)
	send := make([]float32, blk)
	for i := range send {
		send[i] = float32(c.Rank()*blk + i)
	}
	recv := make([]float32, n*blk)
	if err := AllGather(ctx, c, send, recv); err != nil {
		return err
	}
	for i, v := range recv {
		if v != float32(i) {
			return fmt.Errorf("rank %d allgather: [%d] = %v", c.Rank(), i, v)
		}
	}
	full := make([]float32, n*blk)
	for i := range full {
		full[i] = float32(i + c.Rank())
	}
	out := make([]float32, blk)
	if err := ReduceScatter(ctx, c, full, out, Avg); err != nil {
		return err
	}
	for i, v := range out {
		if want := float32(c.Rank()*blk+i) + float32(n-1)/2; v != want {
			return fmt.Errorf("rank %d reducescatter avg: [%d] = %v, want %v", c.Rank(), i, v, want)
		}
	}
	return c.Barrier(ctx)
}

// TestHierarchicalSelection: the table picks the hierarchical algorithms
// only across hosts, above the threshold, and GORUN_ALGO forces flat.
func TestHierarchicalSelection(t *testing.T) {
	cs := newLocal(t, 4, withHosts(0, 0, 1, 1))
	c := cs[0]
	if !c.hierFor(collectives.AllReduce, 16<<20) || c.hierFor(collectives.AllReduce, 8) {
		t.Errorf("allreduce: 16 MiB %v, 8 B %v", c.hierFor(collectives.AllReduce, 16<<20), c.hierFor(collectives.AllReduce, 8))
	}
	flat := newLocal(t, 4, withHosts(0, 0, 1, 1), WithAlgorithm("allreduce:ring"))
	if flat[0].hierFor(collectives.AllReduce, 16<<20) || !flat[0].hierFor(collectives.Broadcast, 16<<20) {
		t.Errorf("allreduce:ring still picks hierarchical allreduce, or no longer hierarchical broadcast")
	}
	uneven := newLocal(t, 4, withHosts(0, 1, 1, 1))
	if uneven[0].hierFor(collectives.AllGather, 16<<20) || !uneven[0].hierFor(collectives.AllReduce, 16<<20) {
		t.Errorf("1+3: allgather must stay flat, allreduce hierarchical")
	}
	perHost := newLocal(t, 3, withHosts(0, 1, 2))
	if perHost[0].hierFor(collectives.AllReduce, 16<<20) {
		t.Errorf("one rank per host picks hierarchical")
	}
}

// TestHierarchicalPipeline checks allreduces and broadcasts cut into
// several pieces (hierPieces), with a last piece that does not split into
// equal shards, the allreduce both ways between two hosts.
func TestHierarchicalPipeline(t *testing.T) {
	count := hierPipelineCount
	if m := hierPieces(count * 8); m != 3 {
		t.Fatalf("hierPieces(%d) = %d, want 3", count*8, m)
	}
	for _, name := range []string{"2x2", "2x3", "interleave", "1+3"} {
		t.Run(name, func(t *testing.T) {
			layout := hostLayouts[name]
			cs := newLocal(t, len(layout), withHosts(layout...))
			check := func(c *Comm) error {
				if err := checkAllReduceSum(context.Background(), c, count); err != nil {
					return err
				}
				return checkBroadcasts(context.Background(), c, count)
			}
			runAll(t, cs, check)
			if cs[0].hier.back == nil {
				return
			}
			defer func() { hierDirected = true }()
			hierDirected = false
			runAll(t, cs, check)
		})
	}
}

// hierPipelineCount is a float64 count that hierAllReduce cuts into 3
// pieces, the last not splitting into equal shards.
const hierPipelineCount = 3*hierPieceBytes/8 + 5

// checkAllReduceSum sums count float64s over c and checks the result.
func checkAllReduceSum(ctx context.Context, c *Comm, count int) error {
	n := c.Size()
	buf := make([]float64, count)
	for i := range buf {
		buf[i] = float64(c.Rank()*1000 + i)
	}
	if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
		return err
	}
	for i, v := range buf {
		if want := float64(1000*n*(n-1)/2 + n*i); v != want {
			return fmt.Errorf("rank %d allreduce of %d: [%d] = %v, want %v", c.Rank(), count, i, v, want)
		}
	}
	return nil
}

// checkBroadcasts broadcasts count int64s from every root and checks them.
func checkBroadcasts(ctx context.Context, c *Comm, count int) error {
	for root := range c.Size() {
		buf := make([]int64, count)
		if c.Rank() == root {
			for i := range buf {
				buf[i] = int64(root*100000 + i)
			}
		}
		if err := Broadcast(ctx, c, buf, root); err != nil {
			return err
		}
		for i, v := range buf {
			if v != int64(root*100000+i) {
				return fmt.Errorf("rank %d broadcast of %d from %d: [%d] = %d", c.Rank(), count, root, i, v)
			}
		}
	}
	return nil
}

// TestHierPipelineErrors: hierPipeline's order (a piece crosses after its
// local phase, gathers after it crossed) and its errors: the failing
// phase's error, not the cancellation it causes in the other, and a
// caller's cancellation.
func TestHierPipelineErrors(t *testing.T) {
	c := &Comm{}
	boom := errors.New("boom")
	run := func(ctx context.Context, failLocal, failCross int) ([]string, error) {
		var mu sync.Mutex
		var log []string
		note := func(s string, i int) {
			mu.Lock()
			log = append(log, fmt.Sprintf("%s%d", s, i))
			mu.Unlock()
		}
		wait := func(ctx context.Context) error { // a phase blocked on a peer
			<-ctx.Done()
			return fmt.Errorf("blocked: %w", ctx.Err())
		}
		err := hierPipeline(ctx, c, 4, func(ctx context.Context, i int) error {
			note("L", i)
			if i == failLocal {
				return boom
			}
			if failCross >= 0 && i > failCross {
				return wait(ctx)
			}
			return nil
		}, func(ctx context.Context, i int) error {
			note("X", i)
			if i == failCross {
				return boom
			}
			if failLocal >= 0 && i >= failLocal-1 {
				return wait(ctx)
			}
			return nil
		}, func(ctx context.Context, i int) error {
			note("G", i)
			return nil
		})
		return log, err
	}
	log, err := run(context.Background(), -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for k, s := range log {
		pos[s] = k
	}
	for i := range 4 {
		l, x, g := fmt.Sprint("L", i), fmt.Sprint("X", i), fmt.Sprint("G", i)
		if pos[l] > pos[x] || pos[x] > pos[g] || len(log) != 12 {
			t.Fatalf("order %v", log)
		}
	}
	for _, tc := range []struct{ local, cross int }{{2, -1}, {-1, 1}, {0, -1}, {-1, 3}} {
		if log, err := run(context.Background(), tc.local, tc.cross); err != boom {
			t.Errorf("local fails at %d, cross at %d: %v (calls %v), want boom", tc.local, tc.cross, err, log)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := run(ctx, -1, -1); !errors.Is(err, context.Canceled) && err != nil {
		t.Errorf("cancelled caller: %v", err)
	}
}

// TestHierPipelineAbort: a rank that gives up while the others run an
// allreduce in pieces fails it on every rank, named by its rank in the
// whole communicator, within seconds.
func TestHierPipelineAbort(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 4, withHosts(0, 0, 1, 1))
	start := time.Now()
	errs := onAll(cs, func(c *Comm) error {
		if c.Rank() == 3 {
			time.Sleep(50 * time.Millisecond)
			c.Abort(errors.New("user gave up"))
			return c.Err()
		}
		return checkAllReduceSum(ctx, c, hierPipelineCount)
	})
	checkAll(t, "abort during a pipelined allreduce", errs, ErrAborted, 3)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("abort took %v", d)
	}
}

// TestHierarchicalLogged: with GORUN_DEBUG=info every rank logs the first
// allreduce that runs hierarchically, once, and no flat one (the
// reliability tests look for the line after Shrink and Grow).
func TestHierarchicalLogged(t *testing.T) {
	t.Setenv("GORUN_DEBUG", "info")
	var buf strings.Builder // written under debugLog's lock
	debugLog.SetOutput(&buf)
	t.Cleanup(func() { debugLog.SetOutput(os.Stderr) })
	cs := newLocal(t, 4, withHosts(0, 0, 1, 1))
	for _, count := range []int{3, hierMinBytes / 8, hierMinBytes / 8} {
		runAll(t, cs, func(c *Comm) error { return checkAllReduceSum(context.Background(), c, count) })
	}
	debugLog.SetOutput(os.Stderr)
	out := buf.String()
	for r := range cs {
		line := fmt.Sprintf("gorun rank %d: allreduce of %d bytes runs hierarchically (rank %d of 4 on 2 hosts", r, hierMinBytes, r)
		if n := strings.Count(out, line); n != 1 {
			t.Errorf("rank %d: %d lines %q, want 1", r, n, line)
		}
	}
	if n := strings.Count(out, "runs hierarchically"); n != len(cs) {
		t.Errorf("%d lines say a collective runs hierarchically, want %d:\n%s", n, len(cs), out)
	}
}
