//go:build linux

package shm

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

// BenchmarkMemcpy is the baseline: copy() between two shared mappings.
func BenchmarkMemcpy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("bytes="+sz.name, func(b *testing.B) {
			src, err := unix.Mmap(-1, 0, sz.n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Munmap(src)
			dst, err := unix.Mmap(-1, 0, sz.n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Munmap(dst)
			copy(dst, src)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkPostWrite posts writes, one signaled in 16, from an Alloc'd
// buffer into the peer's Alloc'd region (the one-sided memcpy) or, with
// mem=registered, its registered Go memory (cross-memory attach).
func BenchmarkPostWrite(b *testing.B) {
	for _, mem := range []string{"alloc", "registered"} {
		for _, sz := range benchSizes {
			name := "bytes=" + sz.name
			if mem == "registered" {
				name = "mem=registered/" + name
			}
			b.Run(name, func(b *testing.B) {
				a, _, da, db := pair(b, rdma.Config{})
				acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
				var dst *rdma.MR
				var err error
				if mem == "alloc" {
					dst, err = db.Alloc(sz.n, acc)
				} else {
					dst, err = db.Register(make([]byte, sz.n), acc)
				}
				if err != nil {
					b.Fatal(err)
				}
				src, _ := da.Alloc(sz.n, rdma.AccessLocalWrite)
				ctx := context.Background()
				// Warm up: fault in both sides' pages, as the memcpy baseline does.
				a.PostWrite(0, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
				a.GetSendComp(ctx)
				b.SetBytes(int64(sz.n))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					flags := rdma.Flags(0)
					if i%16 == 15 || i == b.N-1 {
						flags = rdma.FlagSignaled
					}
					if err := a.PostWrite(uint64(i), src.Bytes(), src, flags, dst.Addr(), dst.RKey()); err != nil {
						b.Fatal(err)
					}
					if flags != 0 {
						if wc, err := a.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
							b.Fatal(wc, err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkPostSend streams sends into receives that a goroutine reposts.
func BenchmarkPostSend(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("bytes="+sz.name, func(b *testing.B) {
			a, rb, da, db := pair(b, rdma.Config{RNRRetry: -1})
			src, _ := da.Alloc(sz.n, rdma.AccessLocalWrite)
			depth := min(32, (64<<20)/sz.n)
			dst, _ := db.Alloc(sz.n*depth, rdma.AccessLocalWrite)
			// Fault the pages in first, as the memcpy baseline does.
			clear(dst.Bytes())
			clear(src.Bytes())
			for i := 0; i < depth; i++ {
				rb.PostRecv(uint64(i), dst.Bytes()[i*sz.n:(i+1)*sz.n], dst)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			n := b.N
			go func() {
				for i := 0; i < n; i++ {
					wc, err := rb.GetRecvComp(ctx)
					if err != nil || wc.Status != rdma.StatusSuccess {
						done <- fmt.Errorf("recv %d: %+v %v", i, wc, err)
						return
					}
					j := wc.WRID
					rb.PostRecv(j, dst.Bytes()[int(j)*sz.n:(int(j)+1)*sz.n], dst)
				}
				done <- nil
			}()
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for i := 0; i < n; i++ {
				flags := rdma.Flags(0)
				if i%16 == 15 || i == n-1 {
					flags = rdma.FlagSignaled
				}
				if err := a.PostSend(uint64(i), src.Bytes(), src, flags); err != nil {
					b.Fatal(err)
				}
				if flags != 0 {
					if wc, err := a.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
						b.Fatal(wc, err)
					}
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkLatency is an 8-byte send ping-pong with a peer goroutine or a
// peer process (this test binary re-run); ns/one-way is half the round
// trip.
func BenchmarkLatency(b *testing.B) {
	b.Run("peer=goroutine", func(b *testing.B) {
		a, e, da, db := pair(b, rdma.Config{RNRRetry: -1})
		eb, _ := db.Alloc(64, rdma.AccessLocalWrite)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e.PostRecv(0, eb.Bytes()[:8], eb)
		go func() {
			for {
				if _, err := e.GetRecvComp(ctx); err != nil {
					return // a closed at cleanup
				}
				e.PostRecv(0, eb.Bytes()[:8], eb)
				e.PostSend(0, eb.Bytes()[8:16], eb, 0)
			}
		}()
		pingPong(b, a, da)
	})
	for _, after := range []time.Duration{spinAfterWake, spinFor} {
		b.Run(fmt.Sprintf("peer=process/spin-after-wake=%v", after), func(b *testing.B) {
			defer func(d time.Duration) { spinAfterWake = d }(spinAfterWake)
			spinAfterWake = after
			latencyProcess(b, 0, "GORUN_SHM_SPIN_AFTER_WAKE="+after.String())
		})
	}
	// What comm asks for when every rank on the host has a CPU of its own.
	b.Run("peer=process/spin=50µs", func(b *testing.B) {
		latencyProcess(b, 50*time.Microsecond, "GORUN_SHM_SPIN=50µs")
	})
	// What the collectives engine does: both sides spin in Poll on a shared
	// CQ, write-with-immediate (bench_cq_test.go).
	b.Run("peer=process/cq=poll/op=writeimm", func(b *testing.B) { latencyCQ(b, true) })
	b.Run("peer=process/cq=poll/op=send", func(b *testing.B) { latencyCQ(b, false) })
}

// latencyProcess is the ping-pong with this test binary re-run as the peer.
func latencyProcess(b *testing.B, spin time.Duration, env ...string) {
	dev, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte(childToken), RNRRetry: -1, Spin: spin})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	ln, err := dev.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cmd, out := startChild(b, "pong", ln.Addr().String(), env...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := ln.Accept(ctx)
	if err != nil {
		b.Fatalf("accept: %v\nchild:\n%s", err, out)
	}
	defer a.Close()
	pingPong(b, a, dev)
	reportChildFutex(b, a, cmd, out)
}

func pingPong(b *testing.B, a rdma.Conn, dev rdma.Device) {
	ab, _ := dev.Alloc(64, rdma.AccessLocalWrite)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	round := func() {
		a.PostRecv(0, ab.Bytes()[:8], ab)
		a.PostSend(0, ab.Bytes()[8:16], ab, 0)
		if wc, err := a.GetRecvComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
			b.Fatal(wc, err)
		}
	}
	for i := 0; i < 100; i++ {
		round()
	}
	b.SetBytes(8)
	waits, wakes := bellCalls[bellSleep].Load(), bellCalls[bellWake].Load()
	rtt := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		round()
		rtt[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(rtt)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
	// The median: on an oversubscribed host the mean is the scheduler's.
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2, "p50-ns/one-way")
	// This process's doorbell sleeps and writes per round trip (the peer process's
	// are not counted).
	b.ReportMetric(float64(bellCalls[bellSleep].Load()-waits)/float64(b.N), "sleeps/op")
	b.ReportMetric(float64(bellCalls[bellWake].Load()-wakes)/float64(b.N), "wakes/op")
}

// BenchmarkWriteVsMemcpy interleaves, iteration by iteration, a plain copy
// between two shared mappings and a signaled PostWrite of the same size
// into the peer's Alloc'd region (post to completion), and reports both
// median bandwidths and their ratio: the host moves its vCPUs around, so
// only interleaved figures compare.
func BenchmarkWriteVsMemcpy(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("bytes="+sz.name, func(b *testing.B) {
			a, _, da, db := pair(b, rdma.Config{})
			dst, _ := db.Alloc(sz.n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
			src, _ := da.Alloc(sz.n, rdma.AccessLocalWrite)
			m1, _ := unix.Mmap(-1, 0, sz.n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			m2, _ := unix.Mmap(-1, 0, sz.n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
			defer unix.Munmap(m1)
			defer unix.Munmap(m2)
			ctx := context.Background()
			write := func() {
				if err := a.PostWrite(0, src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
					b.Fatal(err)
				}
				if wc, err := a.GetSendComp(ctx); err != nil || wc.Status != rdma.StatusSuccess {
					b.Fatal(wc, err)
				}
			}
			copy(m2, m1)
			write()
			// Per-iteration times: on a shared, oversubscribed host the
			// medians say more than the totals (a preempted iteration
			// lands in one of the two).
			tCopy := make([]time.Duration, b.N)
			tWrite := make([]time.Duration, b.N)
			b.SetBytes(int64(sz.n))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				copy(m2, m1)
				t1 := time.Now()
				write()
				tWrite[i] = time.Since(t1)
				tCopy[i] = t1.Sub(t0)
			}
			b.StopTimer()
			med := func(d []time.Duration) time.Duration {
				slices.Sort(d)
				return d[len(d)/2]
			}
			mc, mw := med(tCopy), med(tWrite)
			mbs := func(d time.Duration) float64 { return float64(sz.n) / d.Seconds() / 1e6 }
			b.ReportMetric(mbs(mc), "memcpy-MB/s")
			b.ReportMetric(mbs(mw), "write-MB/s")
			b.ReportMetric(mc.Seconds()/mw.Seconds(), "write/memcpy")
		})
	}
}
