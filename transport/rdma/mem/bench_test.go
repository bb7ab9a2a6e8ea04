package mem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/rdmatest"
)

var benchSizes = []int{4 << 10, 64 << 10, 1 << 20, 16 << 20}

// window is how many requests the bandwidth benchmarks keep in flight.
const window = 16

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

func mustMR(b *testing.B, dev rdma.Device, n int, access rdma.Access) *rdma.MR {
	mr, err := dev.Alloc(n, access)
	if err != nil {
		b.Fatal(err)
	}
	return mr
}

func check(b *testing.B, wc rdma.WC, err error) {
	if err == nil {
		err = wc.Err()
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPostWrite measures write bandwidth with a window of signaled
// writes in flight, and one-way latency as a write-with-immediate
// ping-pong (ns/op is one round trip).
func BenchmarkPostWrite(b *testing.B) {
	ctx := context.Background()
	for _, size := range benchSizes {
		b.Run("bytes="+sizeName(size), func(b *testing.B) {
			a, _, devA, devB := rdmatest.Pair(b, rdmatest.Options{Provider: "mem"})
			src := mustMR(b, devA, size, rdma.AccessLocalWrite)
			dst := mustMR(b, devB, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			n := 0
			for i := 0; b.Loop(); i++ {
				if i >= window {
					wc, err := a.GetSendComp(ctx)
					check(b, wc, err)
				}
				if err := a.PostWrite(uint64(i), src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey()); err != nil {
					b.Fatal(err)
				}
				n++
			}
			for i := max(0, n-window); i < n; i++ {
				wc, err := a.GetSendComp(ctx)
				check(b, wc, err)
			}
		})
	}
	b.Run("pingpong/bytes=8", func(b *testing.B) {
		a, c, devA, devB := rdmatest.Pair(b, rdmatest.Options{Provider: "mem"})
		ma := mustMR(b, devA, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		mb := mustMR(b, devB, 8, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		pingPong(b, a, c, func(x rdma.Conn, from, to *rdma.MR) error {
			return x.PostWriteImm(0, from.Bytes(), from, 0, to.Addr(), to.RKey(), 1)
		}, ma, mb)
	})
}

// BenchmarkPostSend measures send bandwidth (a window of sends, each with
// its receive posted just before) and send/receive ping-pong latency.
func BenchmarkPostSend(b *testing.B) {
	ctx := context.Background()
	for _, size := range benchSizes {
		b.Run("bytes="+sizeName(size), func(b *testing.B) {
			a, c, devA, devB := rdmatest.Pair(b, rdmatest.Options{Provider: "mem"})
			src := mustMR(b, devA, size, rdma.AccessLocalWrite)
			dst := mustMR(b, devB, size, rdma.AccessLocalWrite)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			n := 0
			for i := 0; b.Loop(); i++ {
				if i >= window {
					wc, err := c.GetRecvComp(ctx)
					check(b, wc, err)
					wc, err = a.GetSendComp(ctx)
					check(b, wc, err)
				}
				if err := c.PostRecv(uint64(i), dst.Bytes(), dst); err != nil {
					b.Fatal(err)
				}
				if err := a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled); err != nil {
					b.Fatal(err)
				}
				n++
			}
			for i := max(0, n-window); i < n; i++ {
				wc, err := c.GetRecvComp(ctx)
				check(b, wc, err)
			}
		})
	}
	b.Run("pingpong/bytes=8", func(b *testing.B) {
		a, c, devA, devB := rdmatest.Pair(b, rdmatest.Options{Provider: "mem"})
		ma := mustMR(b, devA, 8, rdma.AccessLocalWrite)
		mb := mustMR(b, devB, 8, rdma.AccessLocalWrite)
		pingPong(b, a, c, func(x rdma.Conn, from, _ *rdma.MR) error {
			return x.PostSend(0, from.Bytes(), from, 0)
		}, ma, mb)
	})
}

// pingPong bounces one message between a and c b.N times; post sends
// from one side's region to the other's. Each side re-posts its receive
// before answering.
func pingPong(b *testing.B, a, c rdma.Conn, post func(x rdma.Conn, from, to *rdma.MR) error, ma, mb *rdma.MR) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.SetBytes(8)
	b.ReportAllocs()
	if err := a.PostRecv(0, ma.Bytes(), ma); err != nil {
		b.Fatal(err)
	}
	if err := c.PostRecv(0, mb.Bytes(), mb); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			wc, err := c.GetRecvComp(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err == nil {
				err = c.PostRecv(0, mb.Bytes(), mb)
			}
			if err == nil {
				err = post(c, mb, ma)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	for b.Loop() {
		if err := post(a, ma, mb); err != nil {
			b.Fatal(err)
		}
		wc, err := a.GetRecvComp(ctx)
		check(b, wc, err)
		if err := a.PostRecv(0, ma.Bytes(), ma); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	<-done
}
