//go:build linux

package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
	"github.com/gorun-hpc/gorun/transport/rdma"
	_ "github.com/gorun-hpc/gorun/transport/rdma/shm"
)

// shmEngines connects two engines (ranks 0 and 1) over shm in this
// process, closed at the end of t.
func shmEngines(t *testing.T, p LinkParams) [2]*Engine {
	t.Helper()
	return pairEngines(t, "shm", p)
}

// pairEngines is shmEngines over provider.
func pairEngines(t *testing.T, provider string, p LinkParams) [2]*Engine {
	t.Helper()
	return pairEnginesOn(t, provider, p, func(_ int, d rdma.Device) rdma.Device { return d })
}

// pairEnginesOn is pairEngines with rank i's device wrap(i, the device).
func pairEnginesOn(t *testing.T, provider string, p LinkParams, wrap func(int, rdma.Device) rdma.Device) [2]*Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var devs [2]*Device
	for i := range devs {
		raw, err := rdma.OpenConfig(provider, rdma.Config{RNRRetry: -1})
		if err != nil {
			t.Skipf("%s: %v", provider, err)
		}
		raw = wrap(i, raw)
		if devs[i], err = NewDevice(raw, 16); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := devs[0].Dev.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		l   *Link
		err error
	}
	acc := make(chan res, 1)
	go func() {
		conn, err := ln.AcceptQP(ctx, devs[0].QPInit())
		if err != nil {
			acc <- res{err: err}
			return
		}
		l, err := Establish(ctx, conn, devs[0], 0, p)
		acc <- res{l, err}
	}()
	conn, err := devs[1].Dev.DialQP(ctx, ln.Addr().String(), devs[1].QPInit())
	if err != nil {
		t.Fatal(err)
	}
	l1, err := Establish(ctx, conn, devs[1], 1, p)
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	e := [2]*Engine{NewEngine(0, 2, []*Link{nil, r.l}, devs[:1]), NewEngine(1, 2, []*Link{l1, nil}, devs[1:])}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { e[1].Close(); close(done) }()
		e[0].Close()
		<-done
		devs[0].Close()
		devs[1].Close()
	})
	return e
}

// link is e's link to its one peer.
func link(e *Engine) *Link { return e.links[1-e.Rank].Load() }

// runPair runs one plan per rank at once and returns their errors.
func runPair(ctx context.Context, e [2]*Engine, p [2]*Plan, c [2]*Call) [2]error {
	var errs [2]error
	done := make(chan struct{})
	go func() { errs[1] = e[1].Run(ctx, p[1], c[1], 0); close(done) }()
	errs[0] = e[0].Run(ctx, p[0], c[0], 0)
	<-done
	return errs
}

// f32 is v's bytes.
func f32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Allreduces of sizes on both sides of a mailbox cell (and direct ones)
// in a random order: every result is right, and both channels carried
// messages. The mailbox's cells wrap around many times.
func TestMailboxMixedSizes(t *testing.T) {
	e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
	if link(e[0]).mb == nil || link(e[1]).mb == nil {
		t.Fatal("shm links have no mailbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	counts := []int{0, 1, 2, 6, 7, 16, 100, mbMax / 4, mbMax/4 + 1, 5000, DirectMin/4 + 3}
	chunk := Window(LinkParams{Slots: 4, SlotBytes: 4096}) / 4 // as comm's: an op fits the peer's window
	for i := range 600 {
		n := counts[rng.IntN(len(counts))]
		var p [2]*Plan
		var c [2]*Call
		for r := range 2 {
			v := make([]float32, n)
			for j := range v {
				v[j] = float32(r + 1 + j%5)
			}
			b := f32(v)
			p[r] = Compile(collectives.RecursiveDoublingAllReduce(r, 2, n, chunk))
			c[r] = &Call{Coll: collectives.AllReduce, DType: kernels.Float32, Op: kernels.Sum, Count: n, Seq: uint32(i), Work: b, Input: b}
		}
		if errs := runPair(ctx, e, p, c); errs[0] != nil || errs[1] != nil {
			t.Fatalf("call %d (%d elements): %v", i, n, errs)
		}
		for r := range 2 {
			for j := range n {
				if got, want := math.Float32frombits(binary.LittleEndian.Uint32(c[r].Work[4*j:])), float32(3+2*(j%5)); got != want {
					t.Fatalf("call %d (%d elements), rank %d, element %d: %v, want %v", i, n, r, j, got, want)
				}
			}
		}
	}
	for r := range 2 {
		l := link(e[r])
		t.Logf("rank %d: %d messages through the mailbox, %d staged", r, l.mb.read, l.consumed)
		if l.mb.read < mbCells*2 || l.consumed == 0 {
			t.Errorf("rank %d: %d mailbox and %d staged messages; want both channels, the mailbox wrapped", r, l.mb.read, l.consumed)
		}
	}
}

// sendPlan is rank's plan and call sending (or receiving) n bytes of
// SendRecv message seq to its peer.
func sendPlan(rank int, send bool, n int, seq uint32, buf []byte) (*Plan, *Call) {
	p := Compile(collectives.DirectSendRecv(rank, 2, 1-rank, send, n, 1<<20))
	return p, &Call{Coll: collectives.SendRecv, DType: kernels.Uint8, Count: n, Seq: seq, Work: buf, Input: buf}
}

// A writer that runs ahead fills the mailbox and goes on through the
// staged channel, and the reader takes every message in order. Phases,
// the reader catching up after each: 8-byte messages beyond the mailbox's
// cells (the rest go staged), larger ones (staged), 8-byte ones again
// (the mailbox once the staged ones are consumed and credited).
func TestMailboxFullFallsBack(t *testing.T) {
	e := shmEngines(t, LinkParams{Slots: 8, SlotBytes: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	phases := []struct{ n, size int }{{mbCells + 8, 8}, {8, mbMax + 8}, {2 * mbCells, 8}}
	caught := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		i := 0
		for _, ph := range phases {
			for range ph.n {
				b := make([]byte, ph.size)
				binary.LittleEndian.PutUint64(b, uint64(i))
				p, c := sendPlan(0, true, len(b), uint32(i), b)
				if err := e[0].Run(ctx, p, c, 0); err != nil {
					sent <- err
					return
				}
				i++
			}
			<-caught
		}
		sent <- nil
	}()
	i := 0
	for k, ph := range phases {
		if k == 0 {
			// Let the writer fill the mailbox and go on staged.
			time.Sleep(300 * time.Millisecond)
		}
		for range ph.n {
			b := make([]byte, ph.size)
			p, c := sendPlan(1, false, len(b), uint32(i), b)
			if err := e[1].Run(ctx, p, c, 0); err != nil {
				t.Fatalf("receive %d: %v", i, err)
			}
			if got := binary.LittleEndian.Uint64(b); got != uint64(i) {
				t.Fatalf("receive %d got message %d", i, got)
			}
			i++
		}
		if l := link(e[1]); k == 0 && l.consumed == 0 {
			t.Errorf("%d messages of 8 bytes to a reader that slept all came through its mailbox of %d cells", i, mbCells)
		}
		caught <- struct{}{}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	l := link(e[1])
	t.Logf("%d messages through the mailbox, %d staged", l.mb.read, l.consumed)
	if l.consumed < 16 || l.mb.read < mbCells+mbCells/2 {
		t.Errorf("%d mailbox and %d staged messages; want the mailbox used before and after the staged ones", l.mb.read, l.consumed)
	}
}

// A receiver that sleeps at once (Spin 0) is woken by a message written
// into its mailbox: the writer sees its flag and sends ctrlWake.
func TestMailboxWakesSleeper(t *testing.T) {
	e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
	e[1].SetWait(WaitPolicy{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 50 {
		got := make(chan error, 1)
		b := make([]byte, 8)
		go func() {
			p, c := sendPlan(1, false, 8, uint32(i), b)
			got <- e[1].Run(ctx, p, c, 0)
		}()
		time.Sleep(time.Duration(200+i*20) * time.Microsecond) // the receiver goes to sleep
		m := make([]byte, 8)
		binary.LittleEndian.PutUint64(m, uint64(i)+1)
		p, c := sendPlan(0, true, 8, uint32(i), m)
		if err := e[0].Run(ctx, p, c, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("receive %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("receive %d: the sleeping receiver was not woken", i)
		}
		if v := binary.LittleEndian.Uint64(b); v != uint64(i)+1 {
			t.Fatalf("receive %d got %d", i, v)
		}
	}
	if read := link(e[1]).mb.read; read != 50 {
		t.Errorf("%d of 50 messages came through the mailbox", read)
	}
}

// A call whose sides disagree on the length is a mismatch whichever
// channel the message took: a cell where the receiver expects a staged
// message, and a staged message where it expects a cell.
func TestMailboxMismatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sent, want int
	}{{"cell-for-staged", 8, mbMax + 8}, {"staged-for-cell", mbMax + 8, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ps, cs := sendPlan(0, true, tc.sent, 0, make([]byte, tc.sent))
			pr, cr := sendPlan(1, false, tc.want, 0, make([]byte, tc.want))
			errs := runPair(ctx, e, [2]*Plan{ps, pr}, [2]*Call{cs, cr})
			if !errors.Is(errs[1], ErrMismatch) {
				t.Fatalf("receiver: %v; want ErrMismatch", errs[1])
			}
		})
	}
}
