package comm

import (
	"fmt"
	"sync"
	"testing"
)

// Benchmarks report nccl-tests' bus bandwidth: algbw·2(n-1)/n for
// allreduce, algbw for broadcast. Ranks run in process over mem:
//
//	go test -run '^$' -bench . -benchtime=20x ./comm

// benchRanks runs body(rank) on every rank b.N times, in lockstep.
func benchRanks(b *testing.B, cs []*Comm, bytes int64, factor float64, body func(c *Comm) error) {
	b.SetBytes(bytes)
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	// One untimed call: registration, schedule and connection warm-up.
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = body(c)
		}()
	}
	wg.Wait()
	b.ResetTimer()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := body(c); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	if sec > 0 {
		b.ReportMetric(float64(bytes)/sec/1e9*factor, "busbw_GB/s")
	}
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func BenchmarkAllReduce(b *testing.B) {
	for _, algo := range []string{"ring", "tree", "rd", "hd"} {
		for _, n := range []int{2, 4, 8} {
			for _, bytes := range []int64{8, 64 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("algo=%s/ranks=%d/bytes=%s", algo, n, sizeName(bytes)), func(b *testing.B) {
					cs := newLocal(b, n, WithAlgorithm("allreduce:"+algo))
					bufs := make([][]float32, n)
					for i := range bufs {
						bufs[i] = make([]float32, bytes/4)
					}
					ctx := testCtx(b)
					benchRanks(b, cs, bytes, 2*float64(n-1)/float64(n), func(c *Comm) error {
						return AllReduce(ctx, c, bufs[c.Rank()], bufs[c.Rank()], Sum)
					})
				})
			}
		}
	}
}

func BenchmarkBroadcast(b *testing.B) {
	for _, algo := range []string{"tree", "chain"} {
		for _, n := range []int{2, 4, 8} {
			for _, bytes := range []int64{8, 64 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("algo=%s/ranks=%d/bytes=%s", algo, n, sizeName(bytes)), func(b *testing.B) {
					cs := newLocal(b, n, WithAlgorithm("broadcast:"+algo))
					bufs := make([][]byte, n)
					for i := range bufs {
						bufs[i] = make([]byte, bytes)
					}
					ctx := testCtx(b)
					benchRanks(b, cs, bytes, 1, func(c *Comm) error {
						return Broadcast(ctx, c, bufs[c.Rank()], 0)
					})
				})
			}
		}
	}
}

// BenchmarkReduceScatter: bytes is each rank's input (n blocks); busbw is
// algbw·(n-1)/n of it, as nccl-tests counts.
func BenchmarkReduceScatter(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, bytes := range []int64{64 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%s", n, sizeName(bytes)), func(b *testing.B) {
				cs := newLocal(b, n)
				send, recv := make([][]float32, n), make([][]float32, n)
				for i := range send {
					send[i], recv[i] = make([]float32, bytes/4), make([]float32, bytes/4/int64(n))
				}
				ctx := testCtx(b)
				benchRanks(b, cs, bytes, float64(n-1)/float64(n), func(c *Comm) error {
					return ReduceScatter(ctx, c, send[c.Rank()], recv[c.Rank()], Sum)
				})
			})
		}
	}
}
