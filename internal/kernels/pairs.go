package kernels

import "unsafe"

// Value-index pairs, for MinLoc and MaxLoc (MPI_MINLOC, MPI_MAXLOC).
//
// A pair of element type T is laid out as the Go struct
// struct{ Value T; Index int64 } (and the C struct { T value; int64_t
// index; }): the value at offset 0, the index at offset 8, 16 bytes in
// all on 64-bit platforms (on 32-bit ones, where int64_t aligns to 4, a
// value of 4 bytes or fewer puts the index at offset 4: 12 bytes). Its
// DType is PairOf(DTypeOf[T]()). MinLoc keeps the pair with the smaller
// value, and of equal values the smaller index; MaxLoc the larger value,
// and of equal values the smaller index. A NaN value compares as neither
// smaller nor larger, so the pair already in dst (a) is kept.

// Pair is the memory layout of a value-index pair.
type Pair[T Number] struct {
	Value T
	Index int64
}

// pairBase is the DType of the first pair type: PairOf(d) = pairBase + d.
const pairBase DType = 16

// PairOf returns the DType of value-index pairs of d.
func PairOf(d DType) DType { return pairBase + d }

// IsPair reports whether d is a pair type.
func (d DType) IsPair() bool { return d >= pairBase && int(d) < len(dtypeSizes) }

// Elem returns the value type of a pair type (d itself otherwise).
func (d DType) Elem() DType {
	if d.IsPair() {
		return d - pairBase
	}
	return d
}

func reducePairs(v DType, op Op, p, q, r unsafe.Pointer, n int) {
	switch v {
	case Int8:
		pairsTo[int8](op, p, q, r, n)
	case Int16:
		pairsTo[int16](op, p, q, r, n)
	case Int32:
		pairsTo[int32](op, p, q, r, n)
	case Int64:
		pairsTo[int64](op, p, q, r, n)
	case Uint8:
		pairsTo[uint8](op, p, q, r, n)
	case Uint16:
		pairsTo[uint16](op, p, q, r, n)
	case Uint32:
		pairsTo[uint32](op, p, q, r, n)
	case Uint64:
		pairsTo[uint64](op, p, q, r, n)
	case Float32:
		pairsTo[float32](op, p, q, r, n)
	case Float64:
		pairsTo[float64](op, p, q, r, n)
	case F16:
		pairsTo[Float16](op, p, q, r, n)
	case BF16:
		pairsTo[BFloat16](op, p, q, r, n)
	}
}

func pairsTo[T Number](op Op, p, q, r unsafe.Pointer, n int) {
	ReducePairs(op, unsafe.Slice((*Pair[T])(p), n), unsafe.Slice((*Pair[T])(q), n), unsafe.Slice((*Pair[T])(r), n))
}

// ReducePairs sets dst[i] = a[i] op b[i] for MinLoc and MaxLoc (other ops
// leave dst as it is). dst may be a or b.
func ReducePairs[T Number](op Op, dst, a, b []Pair[T]) {
	if op != MinLoc && op != MaxLoc {
		return
	}
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		x, y := a[i], b[i]
		c, ordered := compare(x.Value, y.Value)
		if op == MaxLoc {
			c = -c
		}
		if ordered && (c > 0 || (c == 0 && y.Index < x.Index)) {
			x = y
		}
		dst[i] = x
	}
}

// compare returns -1, 0 or +1 as x is less than, equal to or greater than
// y; ordered is false when either is a NaN.
func compare[T Number](x, y T) (c int, ordered bool) {
	switch xv := any(x).(type) {
	case int64:
		return cmpOrdered(xv, any(y).(int64))
	case uint64:
		return cmpOrdered(xv, any(y).(uint64))
	case int:
		return cmpOrdered(xv, any(y).(int))
	case uint:
		return cmpOrdered(xv, any(y).(uint))
	}
	// Every other type converts to float64 exactly.
	return cmpOrdered(ToFloat64(x), ToFloat64(y))
}

func cmpOrdered[T ordered](x, y T) (int, bool) {
	switch {
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, x == y
}
