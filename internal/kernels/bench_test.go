package kernels

import (
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// Benchmarks: b.SetBytes is the size of dst, so MB/s of a Reduce is
// comparable with BenchmarkMemcpy of the same size (a reduce moves 3× that
// through memory: two reads and a write; a copy 2×). Every buffer is
// written before it is timed: fresh pages that were never written all map
// the kernel's one zero page, which reads from L1 and flatters the figure.

// touch writes every byte of bufs.
func touch(bufs ...[]byte) {
	for _, b := range bufs {
		for i := range b {
			b[i] = byte(i % 61)
		}
	}
}

// f32Bytes views a float32 slice as bytes.
func f32Bytes(f []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f)) }

var benchSizes = []int{4 << 10, 256 << 10, 16 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func benchReduce(b *testing.B, dt DType, op Op, n int) {
	dst, src := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i % 61) // small finite values of every type
		dst[i] = byte(i % 59)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	for b.Loop() {
		ReduceBytes(dt, op, dst, src)
	}
}

func BenchmarkReduce(b *testing.B) {
	for _, dt := range hotTypes {
		for _, op := range []Op{Sum, Max} {
			for _, n := range benchSizes {
				b.Run(fmt.Sprintf("type=%s/op=%s/bytes=%s", dt, op, sizeName(n)), func(b *testing.B) {
					benchReduce(b, dt, op, n)
				})
			}
		}
	}
}

// BenchmarkReduceLevel compares the levels on float32 and bfloat16 sums.
func BenchmarkReduceLevel(b *testing.B) {
	for _, l := range []level{levelGeneric, levelAVX2, levelAVX512} {
		restore, ok := useLevel(l)
		if !ok {
			continue
		}
		for _, dt := range []DType{Float32, BF16} {
			for _, n := range []int{256 << 10, 16 << 20} {
				b.Run(fmt.Sprintf("level=%s/type=%s/op=sum/bytes=%s", l, dt, sizeName(n)), func(b *testing.B) {
					benchReduce(b, dt, Sum, n)
				})
			}
		}
		restore()
	}
}

func BenchmarkMemcpy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("bytes="+sizeName(n), func(b *testing.B) {
			dst, src := make([]byte, n), make([]byte, n)
			touch(dst, src)
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkSumVsMemcpy times a float32 sum and a copy of 16 MiB alternately
// in one loop, so that both see the same machine load, and reports each
// one's bandwidth (dst bytes per second) from its total and from its best
// iteration, and the ratios sum/memcpy. On a shared machine the best-of
// figures are the steadier ones.
func BenchmarkSumVsMemcpy(b *testing.B) {
	const n = 16 << 20
	dst, src := make([]float32, n/4), make([]float32, n/4)
	cdst, csrc := make([]byte, n), make([]byte, n)
	touch(f32Bytes(dst), f32Bytes(src), cdst, csrc)
	var tSum, tCopy time.Duration
	bestSum, bestCopy := time.Hour, time.Hour
	b.SetBytes(n)
	for b.Loop() {
		t0 := time.Now()
		Reduce(Sum, dst, src)
		t1 := time.Now()
		copy(cdst, csrc)
		t2 := time.Now()
		tSum += t1.Sub(t0)
		tCopy += t2.Sub(t1)
		bestSum = min(bestSum, t1.Sub(t0))
		bestCopy = min(bestCopy, t2.Sub(t1))
	}
	mbs := func(bytes float64, d time.Duration) float64 { return bytes / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(float64(b.N)*n, tSum), "sum-MB/s")
	b.ReportMetric(mbs(float64(b.N)*n, tCopy), "memcpy-MB/s")
	b.ReportMetric(tCopy.Seconds()/tSum.Seconds(), "sum/memcpy")
	b.ReportMetric(mbs(n, bestSum), "best-sum-MB/s")
	b.ReportMetric(mbs(n, bestCopy), "best-memcpy-MB/s")
	b.ReportMetric(bestCopy.Seconds()/bestSum.Seconds(), "best-sum/memcpy")
}
