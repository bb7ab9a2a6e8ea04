package mem_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/mem"
)

// TestRing256 connects 256 devices in a ring and passes a token that each
// rank increments, with sends, then writes the final count back with
// write-with-immediate. It checks that a simulated world of 256 ranks in
// one process works and stays quick.
func TestRing256(t *testing.T) {
	const n = 256
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	devs := make([]rdma.Device, n)
	lns := make([]rdma.Listener, n)
	for i := range devs {
		devs[i] = mem.Open(rdma.Config{})
		defer devs[i].Close()
		ln, err := devs[i].Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	next := make([]rdma.Conn, n) // i → i+1
	prev := make([]rdma.Conn, n) // i ← i-1
	for i := range devs {
		c, err := devs[i].Dial(ctx, lns[(i+1)%n].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		next[i] = c
	}
	for i := range devs {
		c, err := lns[i].Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prev[i] = c
		lns[i].Close()
	}
	bufs := make([]*rdma.MR, n)
	for i := range bufs {
		mr, err := devs[i].Alloc(8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = mr
		if err := prev[i].PostRecv(uint64(i), mr.Bytes(), mr); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, n)
	for i := 1; i < n; i++ {
		go func() {
			wc, err := prev[i].GetRecvComp(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err != nil {
				errc <- err
				return
			}
			v := binary.LittleEndian.Uint64(bufs[i].Bytes())
			binary.LittleEndian.PutUint64(bufs[i].Bytes(), v+1)
			errc <- next[i].PostSend(uint64(i), bufs[i].Bytes(), bufs[i], 0)
		}()
	}
	tok := make([]byte, 8)
	binary.LittleEndian.PutUint64(tok, 1)
	if err := next[0].PostSend(0, tok, nil, rdma.FlagInline); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	wc, err := prev[0].GetRecvComp(ctx)
	if err != nil || wc.Err() != nil {
		t.Fatalf("%+v %v", wc, err)
	}
	if got := binary.LittleEndian.Uint64(bufs[0].Bytes()); got != n {
		t.Fatalf("token %d, want %d", got, n)
	}
}

// TestRingAllReduce64 runs a ring allreduce (reduce-scatter then
// allgather, 2(n-1) steps of write-with-immediate) over 64 in-process
// ranks: the traffic shape of the collectives, checked for the right sum
// and for taking well under the test timeout.
func TestRingAllReduce64(t *testing.T) {
	const n, chunk = 64, 1024 // ranks, int64s per chunk
	const cb = chunk * 8
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	devs := make([]rdma.Device, n)
	lns := make([]rdma.Listener, n)
	for i := range devs {
		devs[i] = mem.Open(rdma.Config{})
		defer devs[i].Close()
		ln, err := devs[i].Listen(ctx, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	next, prev := make([]rdma.Conn, n), make([]rdma.Conn, n)
	data, stage := make([]*rdma.MR, n), make([]*rdma.MR, n)
	for i := range devs {
		c, err := devs[i].Dial(ctx, lns[(i+1)%n].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		next[i] = c
		var err1, err2 error
		data[i], err1 = devs[i].Alloc(n*cb, rdma.AccessLocalWrite)
		stage[i], err2 = devs[i].Alloc(2*(n-1)*cb, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < n*chunk; k++ {
			binary.LittleEndian.PutUint64(data[i].Bytes()[k*8:], uint64(i*k))
		}
	}
	for i := range devs {
		c, err := lns[i].Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prev[i] = c
		for s := 0; s < 2*(n-1); s++ {
			if err := c.PostRecv(uint64(s), nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	errc := make(chan error, n)
	for r := 0; r < n; r++ {
		go func() { errc <- ringRank(ctx, r, n, cb, next[r], prev[r], data[r], stage[r], stage[(r+1)%n]) }()
	}
	for r := 0; r < n; r++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// sum over ranks i of i*k = k*n(n-1)/2
	for r := 0; r < n; r++ {
		for k := 0; k < n*chunk; k += 97 {
			if got, want := binary.LittleEndian.Uint64(data[r].Bytes()[k*8:]), uint64(k*n*(n-1)/2); got != want {
				t.Fatalf("rank %d element %d: %d, want %d", r, k, got, want)
			}
		}
	}
	t.Logf("%d ranks, %d KiB per rank: %v", n, n*cb>>10, time.Since(start))
}

// ringRank is one rank of TestRingAllReduce64. Step s writes one chunk
// into slot s of the next rank's staging region (dst) with immediate s,
// and consumes slot s of its own (mine), written by the previous rank.
// It waits for each write's completion before the step ends, since a
// chunk sent in the reduce-scatter is overwritten in the allgather.
func ringRank(ctx context.Context, r, n, cb int, next, prev rdma.Conn, data, mine, dst *rdma.MR) error {
	mod := func(x int) int { return ((x % n) + n) % n }
	own := data.Bytes()
	for s := 0; s < 2*(n-1); s++ {
		send := mod(r - s)
		if s >= n-1 {
			send = mod(r + 1 - (s - (n - 1)))
		}
		buf := own[send*cb : (send+1)*cb]
		if err := next.PostWriteImm(uint64(s), buf, data, rdma.FlagSignaled, dst.Addr()+uint64(s*cb), dst.RKey(), uint32(s)); err != nil {
			return err
		}
		wc, err := prev.GetRecvComp(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			return err
		}
		if wc.Imm != uint32(s) || wc.ByteLen != cb {
			return fmt.Errorf("rank %d step %d: completion %+v", r, s, wc)
		}
		recv := mod(r - 1 - s)
		if s >= n-1 {
			recv = mod(r - (s - (n - 1)))
		}
		in := mine.Bytes()[s*cb : (s+1)*cb]
		out := own[recv*cb : (recv+1)*cb]
		if s < n-1 {
			for k := 0; k < cb; k += 8 {
				binary.LittleEndian.PutUint64(out[k:], binary.LittleEndian.Uint64(out[k:])+binary.LittleEndian.Uint64(in[k:]))
			}
		} else {
			copy(out, in)
		}
		if wc, err = next.GetSendComp(ctx); err == nil {
			err = wc.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}
