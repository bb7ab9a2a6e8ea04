package kernels

import "unsafe"

// Reduce sets dst[i] = dst[i] op src[i] for i < len(dst). src must be at
// least as long as dst, and either be dst itself or not overlap it. Avg
// reduces like Sum; the caller divides. Float16 and BFloat16 are computed in
// float32 and rounded once per element.
//
// Min and Max propagate NaN: if either operand is a NaN the result is a NaN
// (its payload is not guaranteed). When the operands compare equal (+0 and
// −0), dst's is kept. Integer Sum and Prod wrap.
func Reduce[T Number](op Op, dst, src []T) {
	ReduceTo(op, dst, dst, src)
}

// ReduceTo sets dst[i] = a[i] op b[i] for i < len(dst), with Reduce's
// rules. a and b must be at least as long as dst; dst may be a or b, but
// must not otherwise overlap them.
func ReduceTo[T Number](op Op, dst, a, b []T) {
	n := len(dst)
	if n == 0 {
		return
	}
	a, b = a[:n], b[:n]
	if op > Avg {
		reduceIntOps(op, dst, a, b)
		return
	}
	switch d := any(dst).(type) {
	case []float32:
		reduceF32(op, d, any(a).([]float32), any(b).([]float32))
	case []float64:
		reduceF64(op, d, any(a).([]float64), any(b).([]float64))
	case []Float16:
		reduceF16(op, d, any(a).([]Float16), any(b).([]Float16))
	case []BFloat16:
		reduceBF16(op, d, any(a).([]BFloat16), any(b).([]BFloat16))
	case []int32:
		reduceI32(op, d, any(a).([]int32), any(b).([]int32))
	case []int64:
		reduceI64(op, d, any(a).([]int64), any(b).([]int64))
	default:
		reduceGeneric(op, dst, a, b)
	}
}

// ReduceBytes is Reduce on raw memory of element type dt (len(dst) bytes).
func ReduceBytes(dt DType, op Op, dst, src []byte) {
	ReduceBytesTo(dt, op, dst, dst, src)
}

// ReduceBytesTo is ReduceTo on raw memory of element type dt (len(dst) bytes).
func ReduceBytesTo(dt DType, op Op, dst, a, b []byte) {
	sz := dt.Size()
	if sz == 0 {
		return
	}
	n := len(dst) / sz
	if n == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(dst))
	q := unsafe.Pointer(unsafe.SliceData(a[:len(dst)]))
	r := unsafe.Pointer(unsafe.SliceData(b[:len(dst)]))
	switch dt {
	case Int8:
		reduceTyped[int8](op, p, q, r, n)
	case Int16:
		reduceTyped[int16](op, p, q, r, n)
	case Int32:
		reduceTyped[int32](op, p, q, r, n)
	case Int64:
		reduceTyped[int64](op, p, q, r, n)
	case Uint8:
		reduceTyped[uint8](op, p, q, r, n)
	case Uint16:
		reduceTyped[uint16](op, p, q, r, n)
	case Uint32:
		reduceTyped[uint32](op, p, q, r, n)
	case Uint64:
		reduceTyped[uint64](op, p, q, r, n)
	case Float32:
		reduceTyped[float32](op, p, q, r, n)
	case Float64:
		reduceTyped[float64](op, p, q, r, n)
	case F16:
		reduceTyped[Float16](op, p, q, r, n)
	case BF16:
		reduceTyped[BFloat16](op, p, q, r, n)
	default:
		reducePairs(dt-pairBase, op, p, q, r, n)
	}
}

func reduceTyped[T Number](op Op, p, q, r unsafe.Pointer, n int) {
	ReduceTo(op, unsafe.Slice((*T)(p), n), unsafe.Slice((*T)(q), n), unsafe.Slice((*T)(r), n))
}
