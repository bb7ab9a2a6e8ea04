package kernels

import "unsafe"

// Reduce sets dst[i] = dst[i] op src[i] for i < len(dst). src must be at
// least as long as dst. Avg reduces like Sum; the caller divides. Float16 and
// BFloat16 are computed in float32 and rounded once per element.
func Reduce[T Number](op Op, dst, src []T) {
	if len(dst) == 0 {
		return
	}
	src = src[:len(dst)]
	switch d := any(dst).(type) {
	case []float32:
		reduceF32(op, d, any(src).([]float32))
	case []float64:
		reduceF64(op, d, any(src).([]float64))
	case []Float16:
		reduceF16(op, d, any(src).([]Float16))
	case []BFloat16:
		reduceBF16(op, d, any(src).([]BFloat16))
	case []int32:
		reduceI32(op, d, any(src).([]int32))
	case []int64:
		reduceI64(op, d, any(src).([]int64))
	default:
		reduceGeneric(op, dst, src)
	}
}

// ReduceBytes is Reduce on raw memory of element type dt (len(dst) bytes).
func ReduceBytes(dt DType, op Op, dst, src []byte) {
	n := len(dst) / dt.Size()
	if n == 0 {
		return
	}
	p, q := unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src[:len(dst)]))
	switch dt {
	case Int8:
		Reduce(op, unsafe.Slice((*int8)(p), n), unsafe.Slice((*int8)(q), n))
	case Int16:
		Reduce(op, unsafe.Slice((*int16)(p), n), unsafe.Slice((*int16)(q), n))
	case Int32:
		Reduce(op, unsafe.Slice((*int32)(p), n), unsafe.Slice((*int32)(q), n))
	case Int64:
		Reduce(op, unsafe.Slice((*int64)(p), n), unsafe.Slice((*int64)(q), n))
	case Uint8:
		Reduce(op, unsafe.Slice((*uint8)(p), n), unsafe.Slice((*uint8)(q), n))
	case Uint16:
		Reduce(op, unsafe.Slice((*uint16)(p), n), unsafe.Slice((*uint16)(q), n))
	case Uint32:
		Reduce(op, unsafe.Slice((*uint32)(p), n), unsafe.Slice((*uint32)(q), n))
	case Uint64:
		Reduce(op, unsafe.Slice((*uint64)(p), n), unsafe.Slice((*uint64)(q), n))
	case Float32:
		Reduce(op, unsafe.Slice((*float32)(p), n), unsafe.Slice((*float32)(q), n))
	case Float64:
		Reduce(op, unsafe.Slice((*float64)(p), n), unsafe.Slice((*float64)(q), n))
	case F16:
		Reduce(op, unsafe.Slice((*Float16)(p), n), unsafe.Slice((*Float16)(q), n))
	case BF16:
		Reduce(op, unsafe.Slice((*BFloat16)(p), n), unsafe.Slice((*BFloat16)(q), n))
	}
}

type ordered interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// reduceRef is the portable reference for the native types.
func reduceRef[T ordered](op Op, dst, src []T) {
	src = src[:len(dst)]
	switch op {
	case Sum, Avg:
		for i := range dst {
			dst[i] += src[i]
		}
	case Prod:
		for i := range dst {
			dst[i] *= src[i]
		}
	case Min:
		for i := range dst {
			if src[i] < dst[i] {
				dst[i] = src[i]
			}
		}
	case Max:
		for i := range dst {
			if src[i] > dst[i] {
				dst[i] = src[i]
			}
		}
	}
}

func reduceGeneric[T Number](op Op, dst, src []T) {
	switch d := any(dst).(type) {
	case []int8:
		reduceRef(op, d, any(src).([]int8))
	case []int16:
		reduceRef(op, d, any(src).([]int16))
	case []int32:
		reduceRef(op, d, any(src).([]int32))
	case []int64:
		reduceRef(op, d, any(src).([]int64))
	case []uint8:
		reduceRef(op, d, any(src).([]uint8))
	case []uint16:
		reduceRef(op, d, any(src).([]uint16))
	case []uint32:
		reduceRef(op, d, any(src).([]uint32))
	case []uint64:
		reduceRef(op, d, any(src).([]uint64))
	case []float32:
		reduceRef(op, d, any(src).([]float32))
	case []float64:
		reduceRef(op, d, any(src).([]float64))
	case []Float16:
		reduceHalfRef(op, d, any(src).([]Float16), Float16.Float32, F16From)
	case []BFloat16:
		reduceHalfRef(op, d, any(src).([]BFloat16), BFloat16.Float32, BF16From)
	}
}

func reduceHalfRef[H Float16 | BFloat16](op Op, dst, src []H, to func(H) float32, from func(float32) H) {
	src = src[:len(dst)]
	for i := range dst {
		a, b := to(dst[i]), to(src[i])
		switch op {
		case Sum, Avg:
			a += b
		case Prod:
			a *= b
		case Min:
			if b < a {
				a = b
			}
		case Max:
			if b > a {
				a = b
			}
		}
		dst[i] = from(a)
	}
}

// The hot paths. Each is the reference until a SIMD version replaces it
// (reduce_amd64.go); they exist as separate functions so that dispatch is
// one switch, done once per call.
var (
	reduceF32  = reduceRef[float32]
	reduceF64  = reduceRef[float64]
	reduceI32  = reduceRef[int32]
	reduceI64  = reduceRef[int64]
	reduceF16  = func(op Op, d, s []Float16) { reduceHalfRef(op, d, s, Float16.Float32, F16From) }
	reduceBF16 = func(op Op, d, s []BFloat16) { reduceHalfRef(op, d, s, BFloat16.Float32, BF16From) }
)

// Scale divides every element by n (for Avg), rounding as T does.
func Scale[T Number](dst []T, n int) {
	switch d := any(dst).(type) {
	case []Float16:
		for i := range d {
			d[i] = F16From(d[i].Float32() / float32(n))
		}
	case []BFloat16:
		for i := range d {
			d[i] = BF16From(d[i].Float32() / float32(n))
		}
	default:
		scaleRef(dst, n)
	}
}

func scaleRef[T Number](dst []T, n int) {
	switch d := any(dst).(type) {
	case []float32:
		for i := range d {
			d[i] /= float32(n)
		}
	case []float64:
		for i := range d {
			d[i] /= float64(n)
		}
	case []int8:
		divInts(d, n)
	case []int16:
		divInts(d, n)
	case []int32:
		divInts(d, n)
	case []int64:
		divInts(d, n)
	case []uint8:
		divInts(d, n)
	case []uint16:
		divInts(d, n)
	case []uint32:
		divInts(d, n)
	case []uint64:
		divInts(d, n)
	}
}

func divInts[T ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64](d []T, n int) {
	for i := range d {
		d[i] /= T(n)
	}
}
