package tcp

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Benchmarks compare the provider with a plain TCP stream over loopback:
//
//	go test -run '^$' -bench 'PostWrite|PostSend|RawTCP|Latency' -benchtime=200ms ./transport/rdma/tcp/
//
// PostWrite and PostSend keep a window of signaled requests in flight and
// count a request when its completion arrives; RawTCP writes the same
// sizes to a net.Conn drained by a reader goroutine. The latency between
// processes, shared-CQ polling against GetRecvComp, is
// BenchmarkPingPongProcess (pingpong_test.go).

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

func window(n int) int {
	if n <= 64<<10 {
		return 64
	}
	return 8
}

func BenchmarkPostWrite(b *testing.B) { benchPostWrite(b, rdma.Config{}) }

// BenchmarkPostWriteChecksum is BenchmarkPostWrite with Config.Checksum
// (GORUN_CHECKSUM=1); the ratio of the two is the cost of CRC32C:
//
//	go test -run '^$' -bench 'PostWrite(Checksum)?/bytes=(1|16)MiB' -benchtime=200ms -count=5 ./transport/rdma/tcp/
func BenchmarkPostWriteChecksum(b *testing.B) { benchPostWrite(b, rdma.Config{Checksum: true}) }

func benchPostWrite(b *testing.B, cfg rdma.Config) {
	for _, s := range benchSizes {
		b.Run("bytes="+s.name, func(b *testing.B) {
			a, _, devA, devB := pair(b, cfg)
			src, err := devA.Alloc(s.n, 0)
			if err != nil {
				b.Fatal(err)
			}
			dst, err := devB.Alloc(s.n, rdma.AccessRemoteWrite)
			if err != nil {
				b.Fatal(err)
			}
			post := func(i int) error {
				return a.PostWrite(uint64(i), src.Bytes(), src, rdma.FlagSignaled, dst.Addr(), dst.RKey())
			}
			stream(b, a, s.n, post)
		})
	}
}

func BenchmarkPostSend(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("bytes="+s.name, func(b *testing.B) {
			a, peer, devA, devB := pair(b, rdma.Config{RNRRetry: -1})
			src, err := devA.Alloc(s.n, 0)
			if err != nil {
				b.Fatal(err)
			}
			dst, err := devB.Alloc(s.n, rdma.AccessLocalWrite)
			if err != nil {
				b.Fatal(err)
			}
			// The peer keeps a window of receives posted, reposting each
			// as it completes (all into one buffer: only the rate counts).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := range window(s.n) {
				if err := peer.PostRecv(uint64(i), dst.Bytes(), dst); err != nil {
					b.Fatal(err)
				}
			}
			go func() {
				for {
					wc, err := peer.GetRecvComp(ctx)
					if err != nil || wc.Status != rdma.StatusSuccess {
						return
					}
					if peer.PostRecv(wc.WRID, dst.Bytes(), dst) != nil {
						return
					}
				}
			}()
			post := func(i int) error { return a.PostSend(uint64(i), src.Bytes(), src, rdma.FlagSignaled) }
			stream(b, a, s.n, post)
		})
	}
}

// stream posts b.N requests of n bytes with a window in flight.
func stream(b *testing.B, a rdma.Conn, n int, post func(i int) error) {
	ctx := context.Background()
	w := window(n)
	wait := func() {
		wc, err := a.GetSendComp(ctx)
		if err != nil || wc.Status != rdma.StatusSuccess {
			b.Fatalf("completion %+v: %v", wc, err)
		}
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	cpu0 := cpuTime()
	inflight := 0
	for i := range b.N {
		if inflight == w {
			wait()
			inflight--
		}
		if err := post(i); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		wait()
	}
	if cpu := cpuTime() - cpu0; cpu > 0 {
		// Both ends run in this process: the CPU a request costs, which a
		// loaded machine disturbs less than the wall clock.
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkRawTCP is the baseline: the same sizes written to a plain
// loopback TCP stream and drained by a reader goroutine.
func BenchmarkRawTCP(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("bytes="+s.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			total := int64(b.N) * int64(s.n)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				buf := make([]byte, s.n)
				for left := total; left > 0; left -= int64(s.n) {
					if _, err := io.ReadFull(c, buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			src := make([]byte, s.n)
			b.SetBytes(int64(s.n))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(src); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkLatency is an 8-byte ping-pong of inline sends; ns/op is half a
// round trip.
func BenchmarkLatency(b *testing.B) {
	a, peer, devA, devB := pair(b, rdma.Config{RNRRetry: -1})
	bufA, _ := devA.Alloc(8, rdma.AccessLocalWrite)
	bufB, _ := devB.Alloc(8, rdma.AccessLocalWrite)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rounds := (b.N + 1) / 2 // b.N one-way messages: ns/op is half a round trip
	if err := peer.PostRecv(0, bufB.Bytes(), bufB); err != nil {
		b.Fatal(err)
	}
	if err := a.PostRecv(0, bufA.Bytes(), bufA); err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for range rounds {
			if _, err := peer.GetRecvComp(ctx); err != nil {
				errc <- err
				return
			}
			peer.PostRecv(0, bufB.Bytes(), bufB)
			if err := peer.PostSend(0, bufB.Bytes(), nil, rdma.FlagInline); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	b.SetBytes(8)
	b.ResetTimer()
	for range rounds {
		if err := a.PostSend(0, bufA.Bytes(), nil, rdma.FlagInline); err != nil {
			b.Fatal(err)
		}
		if _, err := a.GetRecvComp(ctx); err != nil {
			b.Fatal(err)
		}
		a.PostRecv(0, bufA.Bytes(), bufA)
	}
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRawTCPLatency is the baseline of BenchmarkLatency: an 8-byte
// ping-pong on a plain loopback TCP stream; ns/op is half a round trip.
func BenchmarkRawTCPLatency(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	rounds := (b.N + 1) / 2
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		var buf [8]byte
		for range rounds {
			if _, err := io.ReadFull(c, buf[:]); err != nil {
				errc <- err
				return
			}
			if _, err := c.Write(buf[:]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var buf [8]byte
	b.SetBytes(8)
	b.ResetTimer()
	for range rounds {
		if _, err := c.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
