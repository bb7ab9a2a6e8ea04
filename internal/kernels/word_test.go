package kernels

import (
	"math"
	"strconv"
	"testing"
)

// TestWords: int and uint are the fixed-size integers of their size in
// every generic function: their DType, reductions with every op, Scale,
// ToFloat64 and the value-index comparisons.
func TestWords(t *testing.T) {
	wantInt, wantUint := Int64, Uint64
	if strconv.IntSize == 32 {
		wantInt, wantUint = Int32, Uint32
	}
	if DTypeOf[int]() != wantInt || DTypeOf[uint]() != wantUint {
		t.Fatalf("DTypeOf int, uint = %v, %v; want %v, %v", DTypeOf[int](), DTypeOf[uint](), wantInt, wantUint)
	}
	a := []int{3, -7, math.MaxInt, 0, 12, -1}
	b := []int{5, -7, 1, 9, -12, 6}
	ua := []uint{3, 7, math.MaxUint, 0, 12, 1}
	ub := []uint{5, 7, 1, 9, 12, 6}
	reduceAsWords[int, int64, int32](t, a, b)
	reduceAsWords[uint, uint64, uint32](t, ua, ub)
	// Spot checks that do not lean on the fixed-size kernels.
	s := []int{3, -7}
	Reduce(Sum, s, []int{4, 2})
	m := []uint{6, 5}
	Reduce(BAnd, m, []uint{3, 12})
	if s[0] != 7 || s[1] != -5 || m[0] != 2 || m[1] != 4 {
		t.Fatalf("Sum of ints: %v, BAnd of uints: %v; want [7 -5], [2 4]", s, m)
	}
	d := []int{-9, 9}
	Scale(d, 2)
	if d[0] != -4 || d[1] != 4 {
		t.Fatalf("Scale of ints by 2: %v, want [-4 4]", d)
	}
	if ToFloat64(-3) != -3 || ToFloat64(uint(7)) != 7 {
		t.Fatal("ToFloat64 of an int or a uint")
	}
	// Beyond 2^53, where float64 would tie them.
	p := []Pair[int]{{Value: math.MaxInt, Index: 4}}
	ReducePairs(MaxLoc, p, p, []Pair[int]{{Value: math.MaxInt - 1, Index: 1}})
	q := []Pair[uint]{{Value: math.MaxUint - 1, Index: 4}}
	ReducePairs(MaxLoc, q, q, []Pair[uint]{{Value: math.MaxUint, Index: 1}})
	if p[0].Index != 4 || q[0].Index != 1 {
		t.Fatalf("MaxLoc beyond 2^53: indexes %d, %d; want 4, 1", p[0].Index, q[0].Index)
	}
}

// reduceAsWords checks ReduceTo of W, a word-sized integer, against the
// fixed-size type of its size (W64 or W32) with every op.
func reduceAsWords[W int | uint, W64 int64 | uint64, W32 int32 | uint32](t *testing.T, a, b []W) {
	t.Helper()
	for _, op := range []Op{Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor, LAnd, LOr} {
		got, want := make([]W, len(a)), make([]W64, len(a))
		ReduceTo(op, got, a, b)
		if strconv.IntSize == 32 {
			w := make([]W32, len(a))
			ReduceTo(op, w, view[W32](a), view[W32](b))
			for i := range w {
				want[i] = W64(w[i])
			}
		} else {
			ReduceTo(op, want, view[W64](a), view[W64](b))
		}
		for i := range got {
			if W64(got[i]) != want[i] {
				t.Errorf("%T %v: element %d = %d, want %d", got[i], op, i, got[i], want[i])
			}
		}
	}
}
