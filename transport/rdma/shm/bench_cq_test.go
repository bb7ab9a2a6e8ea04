//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// latencyCQ is the 8-byte ping-pong the collectives engine makes: both
// processes bind their queues to a shared CQ and spin in Poll (no
// Get*Comp, no Arm), answering a write-with-immediate (or a send) with
// another.
func latencyCQ(b *testing.B, writeImm bool) {
	dev, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte(childToken), RNRRetry: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	q, _ := dev.CreateCQ(0)
	defer q.Close()
	ln, err := dev.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	role := "pong-cq"
	if !writeImm {
		role = "pong-cq-send"
	}
	cmd, out := startChild(b, role, ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := ln.AcceptQP(ctx, rdma.QPInit{SendCQ: q, RecvCQ: q})
	if err != nil {
		b.Fatalf("accept: %v\nchild:\n%s", err, out)
	}
	defer a.Close()
	buf, raddr, rkey, err := swapKeys(ctx, a, q, dev)
	if err != nil {
		b.Fatalf("%v\nchild:\n%s", err, out)
	}
	wcs := make([]rdma.WC, 32)
	round := func(i int) {
		if writeImm {
			a.PostRecv(0, nil, nil)
			a.PostWriteImm(0, buf.Bytes()[8:16], buf, 0, raddr, rkey, uint32(i))
		} else {
			a.PostRecv(0, buf.Bytes()[16:24], buf)
			a.PostSend(0, buf.Bytes()[8:16], buf, 0)
		}
		if wc, err := spinPoll(ctx, q, wcs); err != nil || wc.Status != rdma.StatusSuccess {
			b.Fatalf("round %d: %+v %v\nchild:\n%s", i, wc, err, out)
		}
	}
	for i := 0; i < 100; i++ {
		round(i)
	}
	b.SetBytes(8)
	waits, wakes := bellCalls[bellSleep].Load(), bellCalls[bellWake].Load()
	rtt := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		round(i)
		rtt[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2, "p50-ns/one-way")
	b.ReportMetric(float64(bellCalls[bellSleep].Load()-waits)/float64(b.N), "sleeps/op")
	b.ReportMetric(float64(bellCalls[bellWake].Load()-wakes)/float64(b.N), "wakes/op")
	reportChildFutex(b, a, cmd, out)
}

// spinPoll polls q until a completion comes, yielding now and then to this
// process's other goroutines (the socket reader notices a peer's end) and
// to other processes (sched_yield, as the engine does when it spins long:
// on an oversubscribed host the peer may need this CPU).
func spinPoll(ctx context.Context, q rdma.CQ, wcs []rdma.WC) (rdma.WC, error) {
	for i := 1; ; i++ {
		if n := q.Poll(wcs); n > 0 {
			if n > 1 {
				return wcs[1], fmt.Errorf("%d completions, want 1", n)
			}
			return wcs[0], nil
		}
		if i%256 == 0 {
			runtime.Gosched()
			if i%4096 == 0 {
				yieldCPU()
			}
			if i%(1<<16) == 0 && ctx.Err() != nil {
				return rdma.WC{}, ctx.Err()
			}
		}
	}
}

// swapKeys tells the peer where its writes go (an Alloc'd buffer's address
// and rkey) and learns the same of it, with a send each way.
func swapKeys(ctx context.Context, c rdma.Conn, q rdma.CQ, dev rdma.Device) (*rdma.MR, uint64, uint32, error) {
	buf, err := dev.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		return nil, 0, 0, err
	}
	b := buf.Bytes()
	c.PostRecv(1, b[64:76], buf)
	binary.LittleEndian.PutUint64(b[0:], buf.Addr())
	binary.LittleEndian.PutUint32(b[8:], buf.RKey())
	c.PostSend(2, b[:12], buf, 0)
	wc, err := spinPoll(ctx, q, make([]rdma.WC, 1))
	if err != nil || wc.WRID != 1 || wc.Status != rdma.StatusSuccess {
		return nil, 0, 0, fmt.Errorf("key exchange: %+v %v", wc, err)
	}
	return buf, binary.LittleEndian.Uint64(b[64:]), binary.LittleEndian.Uint32(b[72:]), nil
}

// childPongCQ is the peer process of latencyCQ.
func childPongCQ(ctx context.Context, t *testing.T, dev rdma.Device, writeImm bool) {
	q, _ := dev.CreateCQ(0)
	c, err := dev.DialQP(ctx, os.Getenv("GORUN_SHM_ADDR"), rdma.QPInit{SendCQ: q, RecvCQ: q})
	if err != nil {
		t.Fatal(err)
	}
	buf, raddr, rkey, err := swapKeys(ctx, c, q, dev)
	if err != nil {
		t.Fatal(err)
	}
	post := func() {
		if writeImm {
			c.PostRecv(0, nil, nil)
		} else {
			c.PostRecv(0, buf.Bytes()[16:24], buf)
		}
	}
	post()
	wcs := make([]rdma.WC, 32)
	for rounds := 0; ; rounds++ {
		wc, err := spinPoll(ctx, q, wcs)
		if err != nil || wc.Status != rdma.StatusSuccess {
			printChildFutex(rounds) // the parent closed: our receive is flushed
			return
		}
		post()
		if writeImm {
			c.PostWriteImm(0, buf.Bytes()[8:16], buf, 0, raddr, rkey, wc.Imm)
		} else {
			c.PostSend(0, buf.Bytes()[8:16], buf, 0)
		}
	}
}

// printChildFutex tells the parent the peer process.s doorbell sleeps and writes.
func printChildFutex(rounds int) {
	fmt.Printf("child-futex waits=%d wakes=%d rounds=%d\n", bellCalls[bellSleep].Load(), bellCalls[bellWake].Load(), rounds)
}

// reportChildFutex closes a, waits for the peer process to finish and
// reports its doorbell sleeps and writes per round trip (setup included).
func reportChildFutex(b *testing.B, a rdma.Conn, cmd *exec.Cmd, out *bytes.Buffer) {
	a.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		b.Logf("peer process did not end")
		return
	}
	var waits, wakes, rounds int
	for line := range bytes.Lines(out.Bytes()) {
		if _, err := fmt.Sscanf(string(line), "child-futex waits=%d wakes=%d rounds=%d", &waits, &wakes, &rounds); err == nil {
			break
		}
	}
	if rounds == 0 {
		b.Logf("peer process reported no rounds:\n%s", out)
		return
	}
	b.ReportMetric(float64(waits)/float64(rounds), "peer-sleeps/op")
	b.ReportMetric(float64(wakes)/float64(rounds), "peer-wakes/op")
}

// BenchmarkMessageCost is the CPU cost of one 8-byte message on a shared
// CQ, both ends on one goroutine (no cross-CPU latency in it): the target
// posts a receive, the initiator posts the write-with-immediate, the
// target's Poll drains the ring and returns the completion.
func BenchmarkMessageCost(b *testing.B) {
	for _, op := range []string{"writeimm", "send"} {
		b.Run("op="+op, func(b *testing.B) {
			a, t, _, qt, da, dt := cqPair(b, rdma.Config{})
			abuf, _ := da.Alloc(64, rdma.AccessLocalWrite)
			tbuf, _ := dt.Alloc(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
			ctx := context.Background()
			wcs := make([]rdma.WC, 32)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if op == "send" {
					t.PostRecv(0, tbuf.Bytes()[:8], tbuf)
					a.PostSend(0, abuf.Bytes()[:8], abuf, 0)
				} else {
					t.PostRecv(0, nil, nil)
					a.PostWriteImm(0, abuf.Bytes()[:8], abuf, 0, tbuf.Addr(), tbuf.RKey(), 1)
				}
				if wc, err := spinPoll(ctx, qt, wcs); err != nil || wc.Status != rdma.StatusSuccess {
					b.Fatal(wc, err)
				}
			}
		})
	}
	// As the collectives engine does it: receives kept posted ahead (it
	// keeps 2·Slots+16), each reposted when it completes; the send is
	// inline, its 40 bytes a header and an 8-byte payload.
	b.Run("op=send/posted=32", func(b *testing.B) {
		a, t, _, qt, da, dt := cqPair(b, rdma.Config{})
		abuf, _ := da.Alloc(64, rdma.AccessLocalWrite)
		tbuf, _ := dt.Alloc(32*64, rdma.AccessLocalWrite)
		ctx := context.Background()
		for i := range 32 {
			if err := t.PostRecv(uint64(i), tbuf.Bytes()[i*64:(i+1)*64], tbuf); err != nil {
				b.Fatal(err)
			}
		}
		wcs := make([]rdma.WC, 32)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := a.PostSend(0, abuf.Bytes()[:40], abuf, rdma.FlagInline); err != nil {
				b.Fatal(err)
			}
			wc, err := spinPoll(ctx, qt, wcs)
			if err != nil || wc.Status != rdma.StatusSuccess {
				b.Fatal(wc, err)
			}
			j := wc.WRID
			if err := t.PostRecv(j, tbuf.Bytes()[j*64:(j+1)*64], tbuf); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An empty Poll over bound connections: what a spinning caller pays.
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("op=poll-empty/conns=%d", n), func(b *testing.B) {
			_, _, q, _, da, _ := cqPair(b, rdma.Config{})
			ctx := testCtx(b)
			if n > 1 {
				db, _ := rdma.OpenConfig("shm", rdma.Config{})
				defer db.Close()
				ln, _ := db.Listen(ctx, "127.0.0.1:0")
				defer ln.Close()
				for range n - 1 {
					go ln.Accept(ctx)
					if _, err := da.DialQP(ctx, ln.Addr().String(), rdma.QPInit{RecvCQ: q}); err != nil {
						b.Fatal(err)
					}
				}
			}
			wcs := make([]rdma.WC, 32)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if q.Poll(wcs) != 0 {
					b.Fatal("completion")
				}
			}
		})
	}
}
