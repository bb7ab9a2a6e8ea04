package kernels

import "sync/atomic"

//go:generate go run ./asmgen

// level is a SIMD instruction-set level.
type level uint8

const (
	levelGeneric level = iota // the portable reference
	levelAVX2                 // AVX2 + F16C
	levelAVX512               // AVX-512 F, BW, DQ, VL
)

var levelNames = [...]string{"generic", "avx2", "avx512"}

func (l level) String() string { return levelNames[l] }

const numOps = int(Avg) + 1

// vec holds one element type's SIMD kernels at one level. A kernel does
// dst[i] = a[i] op b[i] for i < n, n a multiple of lanes; a nil entry means
// the op uses the reference.
type vec[T any] struct {
	lanes int
	fn    [numOps]func(dst, a, b *T, n int)
}

// run applies v's kernel to the whole vectors of dst and returns how many
// elements it did.
func (v *vec[T]) run(op Op, dst, a, b []T) int {
	if int(op) >= numOps || v.fn[op] == nil || len(dst) < v.lanes {
		return 0
	}
	m := len(dst) - len(dst)%v.lanes
	f := v.fn[op]
	for off := 0; off < m; off += asmChunk {
		f(&dst[off], &a[off], &b[off], min(asmChunk, m-off))
	}
	return m
}

// asmChunk bounds the elements of one assembly call. The runtime cannot
// preempt a goroutine inside assembly, so a call on a huge buffer would
// hold up a garbage collection; 256Ki elements take tens of microseconds.
// It is a multiple of every kernel's lanes.
const asmChunk = 1 << 18

// kernelSet is the kernels of one level.
type kernelSet struct {
	level level
	f32   vec[float32]
	f64   vec[float64]
	i32   vec[int32]
	i64   vec[int64]
	f16   vec[Float16]
	bf16  vec[BFloat16]
}

// active is the set in use: the best level the CPU has, chosen at start-up
// (detect, in dispatch_*.go). Tests swap it with useLevel.
var active atomic.Pointer[kernelSet]

// supported lists the levels this CPU (and build) can run, best last.
var supported = detect()

func init() { active.Store(newSet(supported[len(supported)-1])) }

func newSet(l level) *kernelSet {
	s := &kernelSet{level: l}
	fill(l, s)
	return s
}

// useLevel makes l the active level (for tests and benchmarks) and returns a
// function that restores the previous one. It reports false if the CPU
// cannot run l.
func useLevel(l level) (restore func(), ok bool) {
	for _, s := range supported {
		if s == l {
			old := active.Swap(newSet(l))
			return func() { active.Store(old) }, true
		}
	}
	return func() {}, false
}

// Level names the SIMD level in use: "avx512", "avx2" or "generic".
func Level() string { return active.Load().level.String() }

func reduceF32(op Op, dst, a, b []float32) {
	m := active.Load().f32.run(op, dst, a, b)
	refTo(op, dst[m:], a[m:], b[m:])
}

func reduceF64(op Op, dst, a, b []float64) {
	m := active.Load().f64.run(op, dst, a, b)
	refTo(op, dst[m:], a[m:], b[m:])
}

func reduceI32(op Op, dst, a, b []int32) {
	m := active.Load().i32.run(op, dst, a, b)
	refTo(op, dst[m:], a[m:], b[m:])
}

func reduceI64(op Op, dst, a, b []int64) {
	m := active.Load().i64.run(op, dst, a, b)
	refTo(op, dst[m:], a[m:], b[m:])
}

func reduceF16(op Op, dst, a, b []Float16) {
	m := active.Load().f16.run(op, dst, a, b)
	f16RefTo(op, dst[m:], a[m:], b[m:])
}

func reduceBF16(op Op, dst, a, b []BFloat16) {
	m := active.Load().bf16.run(op, dst, a, b)
	bf16RefTo(op, dst[m:], a[m:], b[m:])
}
