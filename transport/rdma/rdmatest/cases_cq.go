package rdmatest

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Cases of the poll contract (transport/rdma/cq.go): connections of the
// test side bound with DialQP to one CQ, drained with Poll, Arm and
// Notify. The peer's conns keep private queues.

// caseCQEmptyPoll: Poll on an empty CQ returns 0 (and cannot block: the
// case would hang), with or without conns bound, and allocates nothing;
// nor does a Poll that takes a completion.
func caseCQEmptyPoll(e *env) {
	cq := e.newCQ()
	var wcs [32]rdma.WC
	if n := cq.Poll(wcs[:]); n != 0 {
		e.fatalf("Poll on a new CQ: %d", n)
	}
	cc := e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	if n := cq.Poll(wcs[:]); n != 0 {
		e.fatalf("Poll with an idle conn bound: %d", n)
	}
	if n := cq.Poll(nil); n != 0 {
		e.fatalf("Poll(nil): %d", n)
	}
	nonzero := false
	if a := testing.AllocsPerRun(200, func() { nonzero = nonzero || cq.Poll(wcs[:]) != 0 }); a != 0 || nonzero {
		e.fatalf("empty Poll: %v allocations per call (returned nonzero: %v)", a, nonzero)
	}

	// AllocsPerRun calls its function runs+1 times; each takes one
	// completion, spinning until it has come.
	const runs = 200
	for i := 0; i <= runs; i++ {
		e.must(cc.c.PostRecv(wrid(0, false, i), nil, nil), "post_recv")
	}
	e.must(cc.p.Post(postReq{Op: "send", Count: runs + 1}), "peer post_send")
	o := newOrderCheck()
	var bad string
	deadline := time.Now().Add(compWait)
	a := testing.AllocsPerRun(runs, func() {
		for cq.Poll(wcs[:1]) == 0 {
			if time.Now().After(deadline) {
				bad = "a completion did not come in time"
				return
			}
			runtime.Gosched()
		}
		if msg := o.see(wcs[0]); msg != "" && bad == "" {
			bad = msg
		}
	})
	if bad != "" {
		e.fatalf("%s", bad)
	}
	if a != 0 {
		e.fatalf("Poll taking a completion: %v allocations per call", a)
	}
	e.noMore(cq)
}

// caseCQOrder: three conns bound to one CQ (both queues). The peer sends
// interleaved streams of sends and writes-with-immediate on all three, the
// test side interleaves signaled sends, writes-with-immediate and writes
// on all three, and the completions of each conn's receive queue and of
// its send queue come out of the CQ in post order, each once.
func caseCQOrder(e *env) {
	const nc, r, sz = 3, 120, 64
	cq := e.newCQ()
	conns := make([]cqConn, nc)
	for k := range conns {
		conns[k] = e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
	}
	src := e.alloc(r*sz, lw, false)
	fill(src.Bytes(), 81)
	psrc := e.peerBuf(r*sz, lw)
	e.must(e.b.Fill(psrc, 0, r*sz, 82), "peer fill")
	dst := make([]*rdma.MR, nc) // receives, then the peer's write-imm targets
	pdst := make([]rbuf, nc)
	for k, cc := range conns {
		dst[k] = e.alloc(2*r*sz, lw|rw, false)
		pdst[k] = e.peerBuf(2*r*sz, lw|rw)
		for i := 0; i < r; i++ {
			e.must(cc.c.PostRecv(wrid(k, false, i), dst[k].Bytes()[i*sz:(i+1)*sz], dst[k]), "post_recv")
			e.must(cc.p.PostRecv(uint64(i), []seg{{pdst[k].ID, i * sz, sz}}), "peer post_recv")
		}
	}
	peerImm := func(i int) bool { return i%3 == 1 }
	peerDone := make(chan error, 1)
	go func() {
		const chunk = 10
		for i0 := 0; i0 < r; i0 += chunk {
			for k, cc := range conns {
				var rs []postReq
				for i := i0; i < min(i0+chunk, r); i++ {
					q := postReq{Op: "send", WRID: uint64(i), Segs: []seg{{psrc.ID, i * sz, sz}}}
					if peerImm(i) {
						q.Op, q.RAddr, q.RKey, q.Imm = "writeimm", dst[k].Addr()+uint64((r+i)*sz), dst[k].RKey(), uint32(i)
					}
					rs = append(rs, q)
				}
				if err := cc.p.Post(rs...); err != nil {
					peerDone <- err
					return
				}
			}
		}
		peerDone <- nil
	}()
	sendOp := func(i int) rdma.Opcode { return [3]rdma.Opcode{rdma.OpSend, rdma.OpWrite, rdma.OpWrite}[i%3] }
	for i := 0; i < r; i++ {
		for k, cc := range conns {
			b, w, f := src.Bytes()[i*sz:(i+1)*sz], wrid(k, true, i), rdma.FlagSignaled
			var err error
			switch i % 3 {
			case 0:
				err = cc.c.PostSend(w, b, src, f)
			case 1:
				err = cc.c.PostWriteImm(w, b, src, f, pdst[k].Addr+uint64((r+i)*sz), pdst[k].RKey, uint32(i))
			case 2:
				err = cc.c.PostWrite(w, b, src, f, pdst[k].Addr+uint64((r+i)*sz), pdst[k].RKey)
			}
			e.must(err, "post")
		}
	}
	all := e.pollN(cq, 2*nc*r)
	e.must(<-peerDone, "peer posts")
	o := newOrderCheck()
	for _, wc := range all {
		if msg := o.see(wc); msg != "" {
			e.fatalf("%s", msg)
		}
		k, send, i := unwrid(wc.WRID)
		switch {
		case k >= nc:
			e.fatalf("completion %+v of no conn", wc)
		case send:
			e.expect(wc, wc.WRID, sendOp(i), rdma.StatusSuccess)
		case peerImm(i):
			e.expect(wc, wc.WRID, rdma.OpRecvWriteImm, rdma.StatusSuccess)
			if !wc.HasImm || wc.Imm != uint32(i) || wc.ByteLen != sz {
				e.fatalf("write-imm receive %+v: want imm %d, %d bytes", wc, i, sz)
			}
		default:
			e.expect(wc, wc.WRID, rdma.OpRecv, rdma.StatusSuccess)
			if wc.ByteLen != sz {
				e.fatalf("receive %+v: want %d bytes", wc, sz)
			}
		}
	}
	e.noMore(cq)
	want := pattern(r*sz, 82)
	for k := range conns {
		for i := 0; i < r; i++ {
			if !peerImm(i) && checksum(dst[k].Bytes()[i*sz:(i+1)*sz]) != checksum(want[i*sz:(i+1)*sz]) {
				e.fatalf("conn %d receive %d: data differs", k, i)
			}
		}
	}
}

// lostWakeup is how long the stress waits for a token: only a lost
// wake-up waits this long.
const lostWakeup = 5 * time.Second

// wakePlan is one round of the lost-wake-up stress: after delay (spun when
// spin, slept otherwise), the peer posts n requests of kind op on conn k.
type wakePlan struct {
	k, n  int
	op    string
	delay time.Duration
	spin  bool
}

// caseCQLostWakeup: many rounds of Poll (empty), Arm, Poll, wait on
// Notify, racing with the peer, which posts a few requests on one of two
// conns bound to the CQ at a random small delay after the test side has
// taken everything so far; now and then the test side adds a signaled
// write of its own. Each round's completions are the last ones to come, so
// a completion that does not wake the sleeper hangs the round: a wait that
// outlasts lostWakeup is a lost wake-up.
func caseCQLostWakeup(e *env) {
	const nc = 2
	rounds := 1000
	if testing.Short() {
		rounds = 300
	}
	cq := e.newCQ()
	conns := make([]cqConn, nc)
	dst := make([]*rdma.MR, nc)
	for k := range conns {
		conns[k] = e.bind(rdma.QPInit{SendCQ: cq, RecvCQ: cq})
		dst[k] = e.alloc(64, lw|rw, false)
		for i := 0; i < 3*rounds; i++ {
			e.must(conns[k].c.PostRecv(wrid(k, false, i), dst[k].Bytes()[:8], dst[k]), "post_recv")
		}
	}
	psrc := e.peerBuf(64, lw)
	pdst := e.peerBuf(64, lw|rw)
	src := e.alloc(64, lw, false)

	plans := make(chan wakePlan, 1)
	peerErr := make(chan error, 1)
	go func() {
		next := make([]int, nc)
		for p := range plans {
			if p.spin {
				for t0 := time.Now(); time.Since(t0) < p.delay; {
				}
			} else if p.delay > 0 {
				time.Sleep(p.delay)
			}
			q := postReq{Op: p.op, WRID: uint64(next[p.k]), Segs: []seg{{psrc.ID, 0, 8}}, Count: p.n}
			if p.op == "writeimm" {
				q.RAddr, q.RKey, q.Imm = dst[p.k].Addr()+8, dst[p.k].RKey(), 5
			}
			if err := conns[p.k].p.Post(q); err != nil {
				peerErr <- err
				return
			}
			next[p.k] += p.n
		}
	}()
	defer close(plans)

	rng := rand.New(rand.NewPCG(11, 13))
	o := newOrderCheck()
	var wcs [4]rdma.WC
	target, got, waits := 0, 0, 0
	wseq := make([]int, nc)
	take := func(n int) {
		for _, wc := range wcs[:n] {
			if msg := o.see(wc); msg != "" {
				e.fatalf("%s", msg)
			}
			if wc.Status != rdma.StatusSuccess {
				e.fatalf("completion %+v: %v", wc, wc.Status)
			}
		}
		got += n
	}
	for round := 0; round < rounds; round++ {
		p := wakePlan{k: rng.IntN(nc), n: 1 + rng.IntN(3), op: "send"}
		if rng.IntN(2) == 0 {
			p.op = "writeimm"
		}
		switch rng.IntN(3) {
		case 0: // at once
		case 1:
			p.delay, p.spin = time.Duration(rng.IntN(50))*time.Microsecond, true
		case 2:
			p.delay = time.Duration(50+rng.IntN(250)) * time.Microsecond
		}
		plans <- p
		target += p.n
		if rng.IntN(8) == 0 {
			k := rng.IntN(nc)
			e.must(conns[k].c.PostWrite(wrid(k, true, wseq[k]), src.Bytes()[:8], src,
				rdma.FlagSignaled, pdst.Addr, pdst.RKey), "post_write")
			wseq[k]++
			target++
		}
		for got < target {
			if n := cq.Poll(wcs[:]); n > 0 {
				take(n)
				continue
			}
			// Widen the window between the empty Poll and Arm, where
			// a completion that arrives must not be lost.
			switch rng.IntN(3) {
			case 0:
				runtime.Gosched()
			case 1:
				for t0, d := time.Now(), time.Duration(rng.IntN(30))*time.Microsecond; time.Since(t0) < d; {
				}
			}
			cq.Arm()
			if n := cq.Poll(wcs[:]); n > 0 {
				take(n)
				continue
			}
			waits++
			select {
			case <-cq.Notify():
			case err := <-peerErr:
				e.fatalf("peer posts: %v", err)
			case <-time.After(lostWakeup):
				e.fatalf("lost wake-up in round %d: %d of %d completions, Poll empty after Arm and no token for %v", round, got, target, lostWakeup)
			}
		}
		if got > target {
			e.fatalf("round %d: %d completions, want %d", round, got, target)
		}
	}
	e.noMore(cq)
	e.t.Logf("%d rounds, %d completions, %d waits on Notify", rounds, got, waits)
}
