package kernels

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks: b.SetBytes is the size of dst, so MB/s of a Reduce is
// comparable with BenchmarkMemcpy of the same size (a reduce moves 3× that
// through memory: two reads and a write; a copy 2×).

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
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkSumVsMemcpy times a float32 sum and a copy of 16 MiB alternately
// in one loop, so that both see the same machine load, and reports their
// ratio (sum MB/s over memcpy MB/s, both counting dst bytes).
func BenchmarkSumVsMemcpy(b *testing.B) {
	const n = 16 << 20
	dst, src := make([]float32, n/4), make([]float32, n/4)
	cdst, csrc := make([]byte, n), make([]byte, n)
	var tSum, tCopy time.Duration
	b.SetBytes(n)
	for b.Loop() {
		t0 := time.Now()
		Reduce(Sum, dst, src)
		t1 := time.Now()
		copy(cdst, csrc)
		tSum += t1.Sub(t0)
		tCopy += time.Since(t1)
	}
	sec := func(d time.Duration) float64 { return d.Seconds() }
	b.ReportMetric(float64(b.N)*n/1e6/sec(tSum), "sum-MB/s")
	b.ReportMetric(float64(b.N)*n/1e6/sec(tCopy), "memcpy-MB/s")
	b.ReportMetric(sec(tCopy)/sec(tSum), "sum/memcpy")
}
