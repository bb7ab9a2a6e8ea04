package kernels

import (
	"math"
	"testing"
	"unsafe"
)

func TestIntegerOps(t *testing.T) {
	a := []int16{0, 1, 6, -1, 0}
	b := []int16{0, 3, 3, 5, 7}
	want := map[Op][]int16{
		BAnd: {0, 1, 2, 5, 0},
		BOr:  {0, 3, 7, -1, 7},
		BXor: {0, 2, 5, -6, 7},
		LAnd: {0, 1, 1, 1, 0},
		LOr:  {0, 1, 1, 1, 1},
	}
	for op, w := range want {
		dst := make([]int16, len(a))
		ReduceTo(op, dst, a, b)
		for i := range w {
			if dst[i] != w[i] {
				t.Errorf("%s: %v, want %v", op, dst, w)
				break
			}
		}
		// The raw-memory path agrees.
		raw := append([]int16(nil), a...)
		ReduceBytes(Int16, op, unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), 2*len(raw)), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 2*len(b)))
		for i := range w {
			if raw[i] != w[i] {
				t.Errorf("%s bytes: %v, want %v", op, raw, w)
				break
			}
		}
	}
	if BAnd.Valid(Float32) || !BAnd.Valid(Uint8) || Sum.Valid(PairOf(Float32)) || !MinLoc.Valid(PairOf(F16)) || MaxLoc.Valid(Int32) {
		t.Error("Valid disagrees with the documented type rules")
	}
}

func TestPairs(t *testing.T) {
	nan := math.NaN()
	a := []Pair[float64]{{1, 5}, {2, 5}, {3, 1}, {nan, 2}, {4, 0}}
	b := []Pair[float64]{{0, 9}, {2, 3}, {3, 4}, {1, 1}, {nan, 7}}
	min := []Pair[float64]{{0, 9}, {2, 3}, {3, 1}, {nan, 2}, {4, 0}}
	max := []Pair[float64]{{1, 5}, {2, 3}, {3, 1}, {nan, 2}, {4, 0}}
	for op, w := range map[Op][]Pair[float64]{MinLoc: min, MaxLoc: max} {
		dst := make([]Pair[float64], len(a))
		ReducePairs(op, dst, a, b)
		for i := range w {
			if dst[i].Index != w[i].Index || (dst[i].Value != w[i].Value && !math.IsNaN(w[i].Value)) {
				t.Errorf("%s element %d: %v, want %v", op, i, dst[i], w[i])
			}
		}
	}
	// int64 beyond 2^53 compares exactly; the raw-memory path dispatches.
	x := []Pair[int64]{{1<<60 + 1, 0}}
	y := []Pair[int64]{{1 << 60, 1}}
	ReduceBytes(PairOf(Int64), MinLoc, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 16), unsafe.Slice((*byte)(unsafe.Pointer(&y[0])), 16))
	if x[0].Index != 1 {
		t.Errorf("int64 minloc: %v", x[0])
	}
	h := []Pair[Float16]{{F16From(2), 0}}
	ReducePairs(MaxLoc, h, h, []Pair[Float16]{{F16From(-3), 1}})
	if h[0].Index != 0 {
		t.Errorf("float16 maxloc compared bits, not values: %v", h[0])
	}
	if PairOf(Float32).Size() != int(unsafe.Sizeof(Pair[float32]{})) || PairOf(Float64).Size() != 16 || PairOf(Float32).Elem() != Float32 || PairOf(BF16).String() != "(bfloat16,index)" || Int8.IsPair() {
		t.Error("pair dtype metadata")
	}
}
