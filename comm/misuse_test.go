package comm

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVDisplOverflow passes a displacement so large that displacement +
// count wraps around: every rank must fail with ErrInvalid, as for any
// block outside the buffer, where the check let it through and the
// engine sliced out of range (a panic).
func TestVDisplOverflow(t *testing.T) {
	ctx := testCtx(t)
	counts := []int{1, 1, 1}
	huge := []int{0, 1, math.MaxInt}
	cases := []struct {
		name string
		f    func(c *Comm) error
	}{
		{"allgatherv", func(c *Comm) error {
			return AllGatherV(ctx, c, make([]int32, 1), make([]int32, 3), counts, huge)
		}},
		{"gatherv", func(c *Comm) error {
			return GatherV(ctx, c, make([]int32, 1), make([]int32, 3), counts, huge, 0)
		}},
		{"scatterv", func(c *Comm) error {
			return ScatterV(ctx, c, make([]int32, 3), counts, huge, make([]int32, 1), 0)
		}},
		{"alltoallv send", func(c *Comm) error {
			return AllToAllV(ctx, c, make([]int32, 3), counts, huge, make([]int32, 3), counts, nil)
		}},
		{"alltoallv recv", func(c *Comm) error {
			return AllToAllV(ctx, c, make([]int32, 3), counts, nil, make([]int32, 3), counts, huge)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 3)
			errs := onAll(cs, func(c *Comm) error {
				err := tc.f(c)
				if err == nil {
					err = c.Barrier(ctx) // a rank whose part completed fails at its next operation
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("rank %d: %v, want ErrInvalid", r, err)
				}
			}
			t.Logf("rank 1: %v", errs[1])
		})
	}
}

// TestCloseNilComm closes the nil communicator Split gives a negative
// color, as a deferred Close after Split does: ErrInvalid, not a panic.
func TestCloseNilComm(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2)
	errs := onAll(cs, func(c *Comm) error {
		color := 0
		if c.Rank() == 1 {
			color = -1
		}
		sub, err := c.Split(ctx, color, 0)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			return sub.Close()
		}
		if sub != nil {
			t.Errorf("Split with color -1 gave %v, want nil", sub)
		}
		if err := sub.CloseContext(ctx); !errors.Is(err, ErrInvalid) {
			t.Errorf("CloseContext on nil: %v, want ErrInvalid", err)
		}
		if err := sub.Close(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Close on nil: %v, want ErrInvalid", err)
		}
		return nil
	})
	mustAll(t, "split and close", errs)
}

// TestNilCommOperations calls every operation on a nil *Comm, as code
// that goes on with Split's result for a negative color does: each
// returns a *RankError of Rank -1 wrapping ErrInvalid, and each
// non-blocking one a Request that completed with it, where they panicked
// (a nil dereference) before.
func TestNilCommOperations(t *testing.T) {
	ctx := testCtx(t)
	var c *Comm
	b := make([]int32, 2)
	vi := make([]ValueIndex[int32], 2)
	one := []int{2}
	blocking := map[string]func() error{
		"allreduce":     func() error { return AllReduce(ctx, c, b, b, Sum) },
		"reduce":        func() error { return Reduce(ctx, c, b, b, Sum, 0) },
		"broadcast":     func() error { return Broadcast(ctx, c, b, 0) },
		"allgather":     func() error { return AllGather(ctx, c, b, b) },
		"reducescatter": func() error { return ReduceScatter(ctx, c, b, b, Sum) },
		"gather":        func() error { return Gather(ctx, c, b, b, 0) },
		"scatter":       func() error { return Scatter(ctx, c, b, b, 0) },
		"alltoall":      func() error { return AllToAll(ctx, c, b, b) },
		"allgatherv":    func() error { return AllGatherV(ctx, c, b, b, one, nil) },
		"gatherv":       func() error { return GatherV(ctx, c, b, b, one, nil, 0) },
		"scatterv":      func() error { return ScatterV(ctx, c, b, one, nil, b, 0) },
		"alltoallv":     func() error { return AllToAllV(ctx, c, b, one, nil, b, one, nil) },
		"scan":          func() error { return Scan(ctx, c, b, b, Sum) },
		"exscan":        func() error { return ExScan(ctx, c, b, b, Sum) },
		"send":          func() error { return Send(ctx, c, b, 0, 0) },
		"recv":          func() error { return Recv(ctx, c, b, 0, 0) },
		"barrier":       func() error { return c.Barrier(ctx) },
		"allreduceloc":  func() error { return AllReduceLoc(ctx, c, vi, vi, MinLoc) },
		"reduceloc":     func() error { return ReduceLoc(ctx, c, vi, vi, MinLoc, 0) },
		"split":         func() error { _, err := c.Split(ctx, 0, 0); return err },
		"dup":           func() error { _, err := c.Dup(ctx); return err },
		"creategroup":   func() error { _, err := c.CreateGroup(ctx, []int{0}, 0); return err },
		"shrink":        func() error { _, err := c.Shrink(ctx); return err },
		"grow":          func() error { _, err := c.Grow(ctx); return err },
		"refuse":        func() error { return c.Refuse("refuse", nil) },
		"err":           func() error { return c.Err() },
		"close":         func() error { return c.Close() },
	}
	started := map[string]func() *Request{
		"iallreduce":     func() *Request { return IAllReduce(ctx, c, b, b, Sum) },
		"ibroadcast":     func() *Request { return IBroadcast(ctx, c, b, 0) },
		"iallgather":     func() *Request { return IAllGather(ctx, c, b, b) },
		"ireducescatter": func() *Request { return IReduceScatter(ctx, c, b, b, Sum) },
		"ireduce":        func() *Request { return IReduce(ctx, c, b, b, Sum, 0) },
		"igather":        func() *Request { return IGather(ctx, c, b, b, 0) },
		"iscatter":       func() *Request { return IScatter(ctx, c, b, b, 0) },
		"ialltoall":      func() *Request { return IAllToAll(ctx, c, b, b) },
		"ibarrier":       func() *Request { return c.IBarrier(ctx) },
		"iallgatherv":    func() *Request { return IAllGatherV(ctx, c, b, b, one, nil) },
		"igatherv":       func() *Request { return IGatherV(ctx, c, b, b, one, nil, 0) },
		"iscatterv":      func() *Request { return IScatterV(ctx, c, b, one, nil, b, 0) },
		"ialltoallv":     func() *Request { return IAllToAllV(ctx, c, b, one, nil, b, one, nil) },
		"iscan":          func() *Request { return IScan(ctx, c, b, b, Sum) },
		"iexscan":        func() *Request { return IExScan(ctx, c, b, b, Sum) },
		"isend":          func() *Request { return ISend(ctx, c, b, 0, 0) },
		"irecv":          func() *Request { return IRecv(ctx, c, b, 0, 0) },
		"iallreduceloc":  func() *Request { return IAllReduceLoc(ctx, c, vi, vi, MinLoc) },
		"ireduceloc":     func() *Request { return IReduceLoc(ctx, c, vi, vi, MinLoc, 0) },
	}
	check := func(name string, err error) {
		t.Helper()
		var re *RankError
		if !errors.As(err, &re) || !errors.Is(err, ErrInvalid) || re.Rank != -1 || !strings.Contains(err.Error(), "nil communicator") {
			t.Errorf("%s on a nil *Comm: %v, want a *RankError of rank -1 wrapping ErrInvalid", name, err)
		}
	}
	noPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s on a nil *Comm panicked: %v", name, p)
			}
		}()
		f()
	}
	for name, f := range blocking {
		noPanic(name, func() { check(name, f()) })
	}
	for name, f := range started {
		noPanic(name, func() {
			r := f()
			check(name+" Wait", r.Wait(ctx))
			done, err := r.Test()
			if !done {
				t.Errorf("%s on a nil *Comm: Test says not done", name)
			}
			check(name+" Test", err)
		})
	}
	noPanic("abort", func() { c.Abort(nil) })
}

// TestNilCommAccessors reads a nil *Comm as code that logs or branches
// on Split's result for a negative color does: rank and local rank -1,
// sizes and counts 0, no topology, no timeline, where each panicked (a nil
// dereference) before.
func TestNilCommAccessors(t *testing.T) {
	var c *Comm
	ints := map[string]struct {
		f    func() int
		want int
	}{
		"Rank":        {c.Rank, -1},
		"Size":        {c.Size, 0},
		"LocalRank":   {c.LocalRank, -1},
		"LocalSize":   {c.LocalSize, 0},
		"Connections": {c.Connections, 0},
		"Joiners":     {c.Joiners, 0},
	}
	for name, tc := range ints {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s of a nil *Comm panicked: %v", name, p)
				}
			}()
			if got := tc.f(); got != tc.want {
				t.Errorf("%s of a nil *Comm = %d, want %d", name, got, tc.want)
			}
		}()
	}
	others := map[string]func() error{
		"String": func() error {
			if s := c.String(); s != "comm <nil>" {
				return fmt.Errorf("%q", s)
			}
			return nil
		},
		"Topology": func() error {
			if tp := c.Topology(); tp.Hosts != nil || tp.HostOf != nil || tp.NUMAOf != nil {
				return fmt.Errorf("%+v", tp)
			}
			return nil
		},
		"Tracing": func() error {
			if c.Tracing() || c.TraceLane() != "" {
				return errors.New("tracing")
			}
			c.StartSpan("compute", "x", 0).End()
			c.TraceInstant("compute", "x", 0)
			c.TraceSpanSince("compute", "x", 0, 0)
			return nil
		},
	}
	for name, f := range others {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s of a nil *Comm panicked: %v", name, p)
				}
			}()
			if err := f(); err != nil {
				t.Errorf("%s of a nil *Comm: %v", name, err)
			}
		}()
	}
}

// TestInvalidOpMessage passes an Op that is none of the operators: every
// rank fails with ErrInvalid saying "invalid op 200", where the message
// read "op op(200) is not defined for int32".
func TestInvalidOpMessage(t *testing.T) {
	ctx := testCtx(t)
	bad := Op(200)
	cases := map[string]func(c *Comm) error{
		"allreduce": func(c *Comm) error { b := []int32{1, 2}; return AllReduce(ctx, c, b, b, bad) },
		"reduce":    func(c *Comm) error { b := []float64{1, 2}; return Reduce(ctx, c, b, b, bad, 0) },
		"reducescatter": func(c *Comm) error {
			return ReduceScatter(ctx, c, make([]int64, 4), make([]int64, 2), bad)
		},
		"scan": func(c *Comm) error { b := []uint8{1}; return Scan(ctx, c, b, b, bad) },
		"allreduceloc": func(c *Comm) error {
			b := []ValueIndex[float32]{{Value: 1}}
			return AllReduceLoc(ctx, c, b, b, bad)
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			errs := onAll(newLocal(t, 2), f)
			for r, err := range errs {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "invalid op 200") || strings.Contains(err.Error(), "op(") {
					t.Errorf("rank %d: %v, want ErrInvalid saying invalid op 200", r, err)
				}
			}
			t.Logf("rank 0: %v", errs[0])
		})
	}
}

// TestNilRequest waits for a slice of requests with gaps, as MPI_Waitall
// does for MPI_REQUEST_NULL: the nil ones are complete.
func TestNilRequest(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2)
	errs := onAll(cs, func(c *Comm) error {
		buf := make([]int32, 4)
		reqs := make([]*Request, 3)
		if c.Rank() == 0 {
			reqs[1] = ISend(ctx, c, buf, 1, 7)
		} else {
			reqs[2] = IRecv(ctx, c, buf, 0, 7)
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			return err
		}
		if err := reqs[0].Wait(ctx); err != nil {
			return err
		}
		if done, err := reqs[0].Test(); !done || err != nil {
			return fmt.Errorf("Test on a nil request: %v, %v; want true, nil", done, err)
		}
		return nil
	})
	mustAll(t, "WaitAll with nil requests", errs)
}

// TestISendUnrunClosed pins ISend's doc: a started message that nothing
// ran before Close is not sent; its request fails with ErrClosed and the
// receiver's Recv with ErrPeerClosed.
func TestISendUnrunClosed(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2)
	errs := onAll(cs, func(c *Comm) error {
		buf := make([]int32, 4)
		if c.Rank() == 1 {
			if err := Recv(ctx, c, buf, 0, 7); !errors.Is(err, ErrPeerClosed) {
				return fmt.Errorf("Recv: %v, want ErrPeerClosed", err)
			}
			return nil
		}
		r := ISend(ctx, c, buf, 1, 7)
		if err := c.Close(); err != nil {
			return err
		}
		if err := r.Wait(ctx); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("Wait after Close: %v, want ErrClosed", err)
		}
		return nil
	})
	mustAll(t, "ISend never run", errs)
}

// TestDupErrorNamesDup: Dup's error names the operation the caller
// called, not the Split it is made of.
func TestDupErrorNamesDup(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2)
	errs := onAll(cs, func(c *Comm) error {
		c.Close()
		d, err := c.Dup(ctx)
		var re *RankError
		if d != nil || !errors.As(err, &re) || re.Op != "dup" || !errors.Is(err, ErrClosed) {
			return fmt.Errorf("Dup after Close: %v, %v; want a *RankError of op dup wrapping ErrClosed", d, err)
		}
		return nil
	})
	mustAll(t, "Dup after Close", errs)
}

// TestRecvAgainstCollective: a Recv on one rank and a collective that
// waits for it on the other never hang; both fail by the operation
// timeout at the latest (Recv's doc), with an error naming a rank.
func TestRecvAgainstCollective(t *testing.T) {
	ctx := testCtx(t)
	const timeout = 300 * time.Millisecond
	cs := newLocal(t, 2, WithTimeout(timeout))
	start := time.Now()
	errs := onAll(cs, func(c *Comm) error {
		b := make([]int32, 4)
		if c.Rank() == 1 {
			return Recv(ctx, c, b, 0, 0)
		}
		return Gather(ctx, c, b, make([]int32, 8), 0)
	})
	took := time.Since(start)
	for r, err := range errs {
		var re *RankError
		if !errors.As(err, &re) || re.Rank < 0 || re.Rank > 1 {
			t.Errorf("rank %d: %v, want a *RankError naming rank 0 or 1", r, err)
		}
	}
	if took > timeout+10*time.Second {
		t.Errorf("took %v with a timeout of %v", took, timeout)
	}
	t.Logf("after %v: rank 0: %v; rank 1: %v", took.Round(time.Millisecond), errs[0], errs[1])
}

// TestInitTwice: in a launched job (here of one rank), an Init while the
// first one's communicator is open fails at once with ErrInvalid naming
// this rank, where it took the first one's gossip port (an "address
// already in use" on the seed rank) and left the others waiting for the
// world until the timeout; after Close, Init joins again.
func TestInitTwice(t *testing.T) {
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	old := osGetenv
	osGetenv = initVars(initRankVars(0, 1, seed, "twice-"+initRandomID(), initRandomID()))
	defer func() { osGetenv = old }()
	ctx := initTestCtx(t)
	c, err := Init(ctx, WithTransport("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c2, err := Init(ctx, WithTransport("tcp"))
	var re *RankError
	if c2 != nil || !errors.Is(err, ErrInvalid) || !errors.As(err, &re) || re.Rank != 0 {
		if c2 != nil {
			c2.Close()
		}
		c.Close()
		t.Fatalf("second Init: %v, %v; want ErrInvalid naming rank 0", c2, err)
	}
	t.Logf("second Init after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c3, err := Init(ctx, WithTransport("tcp"))
	if err != nil {
		t.Fatalf("Init after Close: %v", err)
	}
	c3.Close()
}

// TestVRecvBlocksOverlap: receive blocks that share elements are
// ErrInvalid on every rank (MPI: erroneous), where the result depended on
// which rank's data arrived last. Overlapping send blocks stay allowed.
func TestVRecvBlocksOverlap(t *testing.T) {
	ctx := testCtx(t)
	counts, displs := []int{2, 2, 2}, []int{0, 1, 3} // blocks 0 and 1 share element 1
	cases := []struct {
		name string
		f    func(c *Comm) error
		want error
	}{
		{"allgatherv", func(c *Comm) error {
			return AllGatherV(ctx, c, make([]int32, 2), make([]int32, 5), counts, displs)
		}, ErrInvalid},
		{"gatherv", func(c *Comm) error {
			return GatherV(ctx, c, make([]int32, 2), make([]int32, 5), counts, displs, 0)
		}, ErrInvalid},
		{"alltoallv recv", func(c *Comm) error {
			return AllToAllV(ctx, c, make([]int32, 6), counts, nil, make([]int32, 5), counts, displs)
		}, ErrInvalid},
		{"scatterv send", func(c *Comm) error {
			return ScatterV(ctx, c, make([]int32, 5), counts, displs, make([]int32, 2), 0)
		}, nil},
		{"alltoallv send", func(c *Comm) error {
			return AllToAllV(ctx, c, make([]int32, 5), counts, displs, make([]int32, 6), counts, nil)
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 3)
			errs := onAll(cs, func(c *Comm) error {
				err := tc.f(c)
				if err == nil && tc.want != nil {
					err = c.Barrier(ctx) // a rank whose part completed fails at its next operation
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, tc.want) {
					t.Errorf("rank %d: %v, want %v", r, err, tc.want)
				}
			}
			t.Logf("rank 1: %v", errs[1])
		})
	}
}

// TestInPlaceForms pins the MPI_IN_PLACE forms the docs promise beyond
// AllReduce's: Reduce and ExScan with send == recv, ReduceScatter with recv
// send's own block, Gather with send the root's own block of recv, Scatter
// with recv the root's own block of send.
func TestInPlaceForms(t *testing.T) {
	ctx := testCtx(t)
	const n, size, root = 3, 3, 1
	cs := newLocal(t, size)
	errs := onAll(cs, func(c *Comm) error {
		r := c.Rank()
		fill := func(b []int64, v int) []int64 {
			for i := range b {
				b[i] = int64(v)
			}
			return b
		}
		check := func(what string, got []int64, want func(i int) int64) error {
			for i, v := range got {
				if v != want(i) {
					return fmt.Errorf("%s: [%d] = %d, want %d", what, i, v, want(i))
				}
			}
			return nil
		}
		b := fill(make([]int64, n), r+1)
		if err := Reduce(ctx, c, b, b, Sum, root); err != nil {
			return err
		}
		if r == root {
			if err := check("reduce", b, func(int) int64 { return 6 }); err != nil {
				return err
			}
		}
		b = fill(make([]int64, n), r+1)
		if err := ExScan(ctx, c, b, b, Sum); err != nil {
			return err
		}
		if err := check("exscan", b, func(int) int64 { return int64(max(1, r*(r+1)/2)) }); err != nil {
			return err
		}
		all := make([]int64, size*n)
		for i := range all {
			all[i] = int64(i)
		}
		mine := all[r*n : (r+1)*n]
		if err := ReduceScatter(ctx, c, all, mine, Sum); err != nil {
			return err
		}
		if err := check("reducescatter", mine, func(i int) int64 { return int64(size * (r*n + i)) }); err != nil {
			return err
		}
		g := fill(make([]int64, size*n), -1)
		send := fill(make([]int64, n), r)
		if r == root {
			send = fill(g[root*n:(root+1)*n], r)
		}
		if err := Gather(ctx, c, send, g, root); err != nil {
			return err
		}
		if r == root {
			if err := check("gather", g, func(i int) int64 { return int64(i / n) }); err != nil {
				return err
			}
		}
		s := make([]int64, size*n)
		for i := range s {
			s[i] = int64(i / n)
		}
		recv := make([]int64, n)
		if r == root {
			recv = s[root*n : (root+1)*n]
		}
		if err := Scatter(ctx, c, s, recv, root); err != nil {
			return err
		}
		return check("scatter", recv, func(int) int64 { return int64(r) })
	})
	mustAll(t, "in-place forms", errs)
}
