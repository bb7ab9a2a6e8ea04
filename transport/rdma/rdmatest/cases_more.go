package rdmatest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// caseConcurrentPosters: several goroutines post on one conn at once;
// every request completes once, and each goroutine's requests complete in
// the order it posted them. Receives are collected concurrently with
// send completions.
func caseConcurrentPosters(e *env) {
	const posters, per, sz = 4, 100, 64
	src := e.alloc(posters*per*sz, lw, false)
	fill(src.Bytes(), 13)
	dst := e.peerBuf(posters*per*sz, lw|rw)
	ab := e.alloc(posters*sz, lw, false)
	for i := 0; i < posters; i++ {
		e.must(e.a.PostRecv(uint64(i), ab.Bytes()[i*sz:(i+1)*sz], ab), "post_recv")
	}
	recvd := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < posters && err == nil; i++ {
			var wc rdma.WC
			if wc, err = e.a.GetRecvComp(e.ctx); err == nil && (wc.WRID != uint64(i) || wc.Status != rdma.StatusSuccess) {
				err = fmt.Errorf("receive completion %+v, want wrid %d", wc, i)
			}
		}
		recvd <- err
	}()
	var wg sync.WaitGroup
	errs := make(chan error, posters)
	for g := 0; g < posters; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				k := g*per + i
				b := src.Bytes()[k*sz : (k+1)*sz]
				if err := e.a.PostWrite(uint64(k), b, src, rdma.FlagSignaled, dst.Addr+uint64(k*sz), dst.RKey); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// The peer answers with sends meanwhile.
	pb := e.peerBuf(sz, lw)
	e.must(e.b.Post(postReq{Op: "send", Segs: []seg{{pb.ID, 0, sz}}, Flags: rdma.FlagSignaled, Count: posters}), "peer sends")
	wg.Wait()
	close(errs)
	for err := range errs {
		e.must(err, "concurrent post_write")
	}
	last := make([]int, posters)
	for g := range last {
		last[g] = -1
	}
	for n := 0; n < posters*per; n++ {
		wc := e.sendComp()
		if wc.Status != rdma.StatusSuccess || wc.WRID >= posters*per {
			e.fatalf("completion %+v", wc)
		}
		g, i := int(wc.WRID)/per, int(wc.WRID)%per
		if i != last[g]+1 {
			e.fatalf("poster %d: completion of its request %d after %d", g, i, last[g])
		}
		last[g] = i
	}
	e.must(<-recvd, "concurrent GetRecvComp")
	for i := 0; i < posters; i++ {
		e.expect(e.peerSendComp(), uint64(i), rdma.OpSend, rdma.StatusSuccess)
	}
	e.fence(1000)
	e.peerSum(dst, 0, src.Bytes(), "concurrent writes")
}

// caseFence: a fenced write after a read of the same remote range does
// not change what the read returns; the write lands afterwards.
func caseFence(e *env) {
	const n = 64 << 10
	rb := e.peerBuf(n, lw|rw|rr)
	e.must(e.b.Fill(rb, 0, n, 17), "peer fill")
	got := e.alloc(n, lw, false)
	src := e.alloc(n, lw, false)
	fill(src.Bytes(), 18)
	e.must(e.a.PostRead(1, got.Bytes(), got, rdma.FlagSignaled, rb.Addr, rb.RKey), "post_read")
	e.must(e.a.PostWrite(2, src.Bytes(), src, rdma.FlagSignaled|rdma.FlagFence, rb.Addr, rb.RKey), "post_write (fenced)")
	e.expectSend(1, rdma.OpRead, rdma.StatusSuccess)
	e.expectSend(2, rdma.OpWrite, rdma.StatusSuccess)
	if checksum(got.Bytes()) != checksum(pattern(n, 17)) {
		e.fatalf("read returned data of the write fenced behind it")
	}
	e.fence(3)
	e.peerSum(rb, 0, src.Bytes(), "fenced write")
}

const shallow = 8

func shallowQueues(c *rdma.Config) {
	c.SendQueueDepth, c.RecvQueueDepth, c.RNRRetry = shallow, shallow, -1
}

// caseQueueFull: with queues of depth 8, the ninth outstanding send and
// the ninth posted receive fail with ErrQueueFull; completing work makes
// room again.
func caseQueueFull(e *env) {
	src := e.alloc(64, lw, false)
	for i := 0; i < shallow; i++ {
		e.must(e.a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled), "post_send within the depth")
	}
	e.wantErr(e.a.PostSend(shallow, src.Bytes(), src, rdma.FlagSignaled), rdma.ErrQueueFull, "send beyond SendQueueDepth")
	rb := e.peerBuf(shallow*64, lw)
	for i := 0; i < shallow; i++ {
		e.must(e.b.PostRecv(uint64(i), []seg{{rb.ID, i * 64, 64}}), "peer post_recv")
	}
	for i := 0; i < shallow; i++ {
		e.expectSend(uint64(i), rdma.OpSend, rdma.StatusSuccess)
		e.expect(e.peerRecvComp(), uint64(i), rdma.OpRecv, rdma.StatusSuccess)
	}
	e.must(e.a.PostSend(shallow, nil, nil, rdma.FlagSignaled), "post_send once the queue drained")
	ab := e.alloc(64, lw, false)
	for i := 0; i < shallow; i++ {
		e.must(e.a.PostRecv(uint64(i), ab.Bytes(), ab), "post_recv within the depth")
	}
	err := e.a.PostRecv(shallow, ab.Bytes(), ab)
	if !errors.Is(err, rdma.ErrQueueFull) {
		e.fatalf("receive beyond RecvQueueDepth: %v, want ErrQueueFull", err)
	}
	e.must(e.b.PostRecv(100, nil), "peer post_recv")
	e.expectSend(shallow, rdma.OpSend, rdma.StatusSuccess)
	e.expect(e.peerRecvComp(), 100, rdma.OpRecv, rdma.StatusSuccess)
}
