package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// A send and its receive of different lengths, where the send is direct
// (engine.DirectMin, 64 KiB, or more; 128 KiB on tcp) and longer than the
// receive: every
// rank fails with ErrMismatch naming the sender, well before the
// communicator's timeout, and the receive's buffer is left as it was.
// Before, a staged receive (shorter than 64 KiB) and the direct send
// waited for each other until the timeout (neither sends the other
// anything), and a shorter direct receive had the send's write fail the
// connection with a remote access error, which named a live rank as
// failed on every rank.
func TestP2PLengthMismatch(t *testing.T) {
	cases := []struct{ send, recv int }{ // bytes
		{80000, 64000},     // direct send, staged receive (tcp: both staged)
		{65536, 65532},     // the same, at the bound
		{160000, 120000},   // tcp's direct send and staged receive
		{1 << 20, 1 << 19}, // both direct, the receive shorter
		{1 << 20, 1<<20 - 4},
	}
	for _, tr := range []string{"mem", "tcp", "shm"} {
		for _, k := range cases {
			for _, nb := range []bool{false, true} {
				name := fmt.Sprintf("%s/send%d_recv%d", tr, k.send, k.recv)
				if nb {
					name += "/isend"
				}
				t.Run(name, func(t *testing.T) {
					if tr == "shm" && (k.send != 80000 && k.send != 1<<20 || k.recv == 1<<20-4) {
						t.Skip("shm: one case of each kind")
					}
					testP2PLengthMismatch(t, tr, k.send/4, k.recv/4, nb)
				})
			}
		}
	}
}

func testP2PLengthMismatch(t *testing.T, tr string, send, recv int, nb bool) {
	ctx := testCtx(t)
	cs := newLocal(t, 3, WithTransport(tr), WithTimeout(60*time.Second))
	sentinel := float32(math.Pi)
	rbuf := make([]float32, recv)
	for i := range rbuf {
		rbuf[i] = sentinel
	}
	start := time.Now()
	errs := onAll(cs, func(c *Comm) error {
		var err error
		switch c.Rank() {
		case 0:
			buf := make([]float32, send)
			if nb {
				err = ISend(ctx, c, buf, 1, 7).Wait(ctx)
			} else {
				err = Send(ctx, c, buf, 1, 7)
			}
		case 1:
			if nb {
				err = IRecv(ctx, c, rbuf, 0, 7).Wait(ctx)
			} else {
				err = Recv(ctx, c, rbuf, 0, 7)
			}
		}
		if err == nil {
			err = c.Barrier(ctx) // the bystander, and a sender whose send completed
		}
		return err
	})
	took := time.Since(start)
	for r, err := range errs {
		var re *RankError
		if !errors.As(err, &re) || !errors.Is(err, ErrMismatch) || re.Rank != 0 {
			t.Errorf("rank %d after %v: %v; want ErrMismatch naming rank 0, the sender", r, took.Round(time.Millisecond), err)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("every rank: ErrMismatch naming rank 0 after %v; rank 1: %v", took.Round(time.Millisecond), errs[1])
	for i, v := range rbuf {
		if v != sentinel {
			t.Fatalf("the receive's buffer was written at element %d (%v): a mismatched message must not be delivered", i, v)
		}
	}
}

// A caller's deadline that passes while its collective still moves names
// this rank on every rank (it gave up on a working job), as a cancel
// does; before, it named the peer it happened to wait for, and every rank
// was told that a working rank timed out. A deadline that passes after
// nothing came for a while still names the peer waited for
// (TestSplitHonoursContext).
func TestDeadlineWhileMovingNamesCaller(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2, WithTimeout(60*time.Second))
	errs := onAll(cs, func(c *Comm) error {
		cctx := ctx
		if c.Rank() == 1 {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
		}
		buf := make([]float32, 4<<20) // 16 MiB: a few ms a call
		for {
			if err := AllReduce(cctx, c, buf, buf, Sum); err != nil {
				return err
			}
		}
	})
	checkAll(t, "deadline", errs, ErrTimeout, 1)
	if !errors.Is(errs[1], context.DeadlineExceeded) {
		t.Fatalf("rank 1: %v; want it to wrap context.DeadlineExceeded", errs[1])
	}
}

// The second direct send of a Run, to a receiver that came late: the
// first send's word to its receiver (the clear-to-send it waits for) is
// answered, the second's receive is staged and shorter. Its own word must
// go too (once a message, not once a Run), or the two wait for each other
// until the timeout. A reviewer's case.
func TestP2PLengthMismatchSecondSend(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2, WithTimeout(60*time.Second))
	errs := onAll(cs, func(c *Comm) error {
		if c.Rank() == 0 {
			return WaitAll(ctx, ISend(ctx, c, make([]float32, 1<<18), 1, 0), ISend(ctx, c, make([]float32, 20000), 1, 1))
		}
		time.Sleep(150 * time.Millisecond) // the sender's first word goes before this rank calls
		return WaitAll(ctx, IRecv(ctx, c, make([]float32, 1<<18), 0, 0), IRecv(ctx, c, make([]float32, 16000), 0, 1))
	})
	checkAll(t, "second direct send", errs, ErrMismatch, 0)
}

// A caller's deadline that passes before anything came names the peer it
// waited for (it never called), not the caller: a Run that never moved
// has not seen its peers work.
func TestDeadlineBeforeAnythingNamesPeer(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2, WithTimeout(60*time.Second))
	short, cancel := context.WithTimeout(ctx, 80*time.Millisecond)
	defer cancel()
	v := []float32{1}
	err := AllReduce(short, cs[0], v, v, Sum) // rank 1 never calls
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rank 0: %v; want ErrTimeout wrapping context.DeadlineExceeded, naming rank 1", err)
	}
}
