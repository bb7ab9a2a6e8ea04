package comm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/engine"
)

// p2pSizes are the lengths (in elements) of the messages p2pRound sends:
// empty, tiny, staged, just under and exactly at the direct threshold
// for 4-byte elements, and several times the staging window.
var p2pSizes = []int{0, 1, 1000, engine.DirectMin/4 - 1, engine.DirectMin / 4, 70_000, 300_001}

func p2pVal(src, dst, k, i, round int) int { return src*7 + dst*13 + k*31 + i + round }

// p2pRound is one rank's part of the crossed exchange: every rank starts
// an ISend of every message to every other rank before any IRecv, with
// even messages of int32 and odd ones of uint16, and checks what it
// received. Then each rank ISends a large message to every peer and takes
// the peers' with a blocking Recv (which joins the started sends), and
// finally a stream of outstanding large messages crosses in both
// directions, driven by Test rather than Wait.
func p2pRound(ctx context.Context, c *Comm, round int) error {
	for _, f := range []func(context.Context, *Comm, int) error{p2pCrossed, p2pJoin, p2pMany} {
		if err := f(ctx, c, round); err != nil {
			return err
		}
	}
	return nil
}

func p2pCrossed(ctx context.Context, c *Comm, round int) error {
	r, n := c.Rank(), c.Size()
	var reqs []*Request
	in32, in16 := map[[2]int][]int32{}, map[[2]int][]uint16{}
	for d := range n {
		if d == r {
			continue
		}
		for k, m := range p2pSizes {
			if k%2 == 0 {
				out := make([]int32, m)
				for i := range out {
					out[i] = int32(p2pVal(r, d, k, i, round))
				}
				reqs = append(reqs, ISend(ctx, c, out, d, k))
			} else {
				out := make([]uint16, m)
				for i := range out {
					out[i] = uint16(p2pVal(r, d, k, i, round))
				}
				reqs = append(reqs, ISend(ctx, c, out, d, k))
			}
		}
	}
	for s := range n {
		if s == r {
			continue
		}
		for k, m := range p2pSizes {
			if k%2 == 0 {
				in32[[2]int{s, k}] = make([]int32, m)
				reqs = append(reqs, IRecv(ctx, c, in32[[2]int{s, k}], s, k))
			} else {
				in16[[2]int{s, k}] = make([]uint16, m)
				reqs = append(reqs, IRecv(ctx, c, in16[[2]int{s, k}], s, k))
			}
		}
	}
	// Waiting on the last request first: every started message must run.
	for i := len(reqs) - 1; i >= 0; i-- {
		if err := reqs[i].Wait(ctx); err != nil {
			return fmt.Errorf("crossed request %d: %w", i, err)
		}
	}
	for key, got := range in32 {
		s, k := key[0], key[1]
		if err := checkBits(fmt.Sprintf("crossed int32 message %d from %d", k, s), got, func(i int) int32 { return int32(p2pVal(s, r, k, i, round)) }); err != nil {
			return err
		}
	}
	for key, got := range in16 {
		s, k := key[0], key[1]
		if err := checkBits(fmt.Sprintf("crossed uint16 message %d from %d", k, s), got, func(i int) uint16 { return uint16(p2pVal(s, r, k, i, round)) }); err != nil {
			return err
		}
	}

	return nil
}

// p2pJoin: a started ISend to the next rank, then a blocking Recv from the
// previous one, which joins it.
func p2pJoin(ctx context.Context, c *Comm, round int) error {
	r, n := c.Rank(), c.Size()
	const big = 200_000
	next, prev := (r+1)%n, (r+n-1)%n
	out := make([]float32, big)
	for i := range out {
		out[i] = float32(p2pVal(r, next, 0, i%1000, round))
	}
	q := ISend(ctx, c, out, next, 99)
	got := make([]float32, big)
	if err := Recv(ctx, c, got, prev, 99); err != nil {
		return fmt.Errorf("blocking recv after isend: %w", err)
	}
	if err := checkBits(fmt.Sprintf("blocking recv from %d", prev), got, func(i int) float32 { return float32(p2pVal(prev, r, 0, i%1000, round)) }); err != nil {
		return err
	}
	return q.Wait(ctx)
}

// p2pMany: 24 messages of 100 KiB each way with the next rank and the
// previous one, progressed by Test alone; then a collective started after
// a message runs after it.
func p2pMany(ctx context.Context, c *Comm, round int) error {
	r, n := c.Rank(), c.Size()
	const many, each = 24, 100 << 10 / 8
	next, prev := (r+1)%n, (r+n-1)%n
	var reqs []*Request
	got := make([][]int64, many)
	for k := range many {
		out := make([]int64, each)
		for i := range out {
			out[i] = int64(p2pVal(r, next, k, i, round))
		}
		reqs = append(reqs, ISend(ctx, c, out, next, k))
	}
	for k := range many {
		got[k] = make([]int64, each)
		reqs = append(reqs, IRecv(ctx, c, got[k], prev, k))
	}
	for _, q := range reqs {
		for {
			done, err := q.Test()
			if err != nil {
				return fmt.Errorf("outstanding: %w", err)
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runtime.Gosched()
		}
	}
	for k := range many {
		if err := checkBits(fmt.Sprintf("outstanding message %d from %d", k, prev), got[k], func(i int) int64 { return int64(p2pVal(prev, r, k, i, round)) }); err != nil {
			return err
		}
	}
	// A collective started after messages runs after them.
	small, in := []int32{int32(r)}, []int32{-1}
	qs, qr := ISend(ctx, c, small, next, 5), IRecv(ctx, c, in, prev, 5)
	sum := []int32{int32(r)}
	if err := AllReduce(ctx, c, sum, sum, Sum); err != nil {
		return err
	}
	if sum[0] != int32(n*(n-1)/2) {
		return fmt.Errorf("allreduce after isend: %d", sum[0])
	}
	if done, err := qr.Test(); !done || err != nil {
		return fmt.Errorf("irecv started before allreduce: done %v, %v after it", done, err)
	}
	if in[0] != int32(prev) {
		return fmt.Errorf("message before allreduce: %d, want %d", in[0], prev)
	}
	return qs.Wait(ctx)
}

// TestISendIRecvCrossed: the exchange that used to hang for 64 KiB and
// more (both ranks send before they receive), in one process.
func TestISendIRecvCrossed(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cs := newLocal(t, n, WithTimeout(20*time.Second))
			ctx := testCtx(t)
			for round := range 2 {
				for i, f := range []func(context.Context, *Comm, int) error{p2pCrossed, p2pJoin, p2pMany} {
					mustAll(t, fmt.Sprintf("round %d phase %d", round, i), onAll(cs, func(c *Comm) error { return f(ctx, c, round) }))
				}
			}
		})
	}
}

// TestISendIRecvMismatchGrouped: a grouped message whose tag differs from
// its receive's fails on both ranks with ErrMismatch (why, "tag 1, this
// rank 2", when the detecting rank's evidence is the first to arrive).
func TestISendIRecvMismatchGrouped(t *testing.T) {
	cs := newLocal(t, 2, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	errs := onAll(cs, func(c *Comm) error {
		peer := 1 - c.Rank()
		out, in := make([]int32, 1<<16), make([]int32, 1<<16)
		tag := 2 + c.Rank() // each receives a tag its peer does not send
		return WaitAll(ctx, ISend(ctx, c, out, peer, 1), IRecv(ctx, c, in, peer, tag))
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
}

// TestISendInvalidPeer: a bad destination fails the request with
// ErrInvalid, at its run, naming the rank.
func TestISendInvalidPeer(t *testing.T) {
	cs := newLocal(t, 2, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	err := ISend(ctx, cs[0], []int32{1}, 5, 0).Wait(ctx)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "destination 5") {
		t.Fatalf("%v, want ErrInvalid naming destination 5", err)
	}
}

// TestSendRecvAllocs: a blocking Send/Recv pair with no started message
// waiting allocates nothing, as before groups.
func TestSendRecvAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cs := newLocal(t, 2)
	ctx := testCtx(t)
	buf := make([]float32, 2)
	done := make(chan error, 1)
	go func() {
		var err error
		for range 102 { // AllocsPerRun runs f once to warm up, then 101 times
			if e := Recv(ctx, cs[1], buf, 0, 0); e != nil && err == nil {
				err = e
			}
		}
		done <- err
	}()
	a := testing.AllocsPerRun(101, func() {
		if err := Send(ctx, cs[0], buf, 1, 0); err != nil {
			t.Error(err)
		}
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a != 0 {
		t.Fatalf("Send allocates %.1f per call", a)
	}
}

// TestProcessesP2P: the crossed exchanges between real processes over
// shared memory and TCP.
func TestProcessesP2P(t *testing.T) {
	for _, transport := range []string{"shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			kids := startRanks(t, 3, "p2p", transport)
			for r, k := range kids {
				err := k.cmd.Wait()
				if err != nil || !strings.Contains(k.out.String(), fmt.Sprintf("RANK %d OK", r)) {
					t.Fatalf("rank %d: %v\n%s", r, err, k.out.String())
				}
			}
		})
	}
}

// TestISendClosed: a message started and never waited for fails when its
// communicator closes, instead of waiting for ever.
func TestISendClosed(t *testing.T) {
	cs := newLocal(t, 2)
	ctx := testCtx(t)
	q := ISend(ctx, cs[0], make([]int32, 1<<20), 1, 0)
	cs[0].Close()
	if err := q.Wait(ctx); err == nil {
		t.Fatal("a send on a closed communicator succeeded")
	}
}
