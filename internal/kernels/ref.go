package kernels

// The portable reference. Every SIMD kernel must agree with it bit for bit,
// except for the payload of a NaN result.

type ordered interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int | ~uint | ~float32 | ~float64
}

// refTo sets dst[i] = a[i] op b[i] for the native types. Min and Max keep a
// unless b is smaller (larger) or a NaN; a NaN in a stays, since no
// comparison with it is true. (y != y is false for integers.)
func refTo[T ordered](op Op, dst, a, b []T) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum, Avg:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Min:
		for i := range dst {
			x, y := a[i], b[i]
			if y < x || y != y {
				x = y
			}
			dst[i] = x
		}
	case Max:
		for i := range dst {
			x, y := a[i], b[i]
			if y > x || y != y {
				x = y
			}
			dst[i] = x
		}
	}
}

// halfRefTo is refTo for Float16 and BFloat16: computed in float32 and
// rounded once.
func halfRefTo[H Float16 | BFloat16](op Op, dst, a, b []H, to func(H) float32, from func(float32) H) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		x, y := to(a[i]), to(b[i])
		switch op {
		case Sum, Avg:
			x += y
		case Prod:
			x *= y
		case Min:
			if y < x || y != y {
				x = y
			}
		case Max:
			if y > x || y != y {
				x = y
			}
		default:
			continue
		}
		dst[i] = from(x)
	}
}

func f16RefTo(op Op, dst, a, b []Float16) { halfRefTo(op, dst, a, b, Float16.Float32, F16From) }

func bf16RefTo(op Op, dst, a, b []BFloat16) {
	halfRefTo(op, dst, a, b, BFloat16.Float32, BF16From)
}

// reduceGeneric dispatches to the reference for every type.
func reduceGeneric[T Number](op Op, dst, a, b []T) {
	switch d := any(dst).(type) {
	case []int8:
		refTo(op, d, any(a).([]int8), any(b).([]int8))
	case []int16:
		refTo(op, d, any(a).([]int16), any(b).([]int16))
	case []int32:
		refTo(op, d, any(a).([]int32), any(b).([]int32))
	case []int64:
		refTo(op, d, any(a).([]int64), any(b).([]int64))
	case []uint8:
		refTo(op, d, any(a).([]uint8), any(b).([]uint8))
	case []uint16:
		refTo(op, d, any(a).([]uint16), any(b).([]uint16))
	case []uint32:
		refTo(op, d, any(a).([]uint32), any(b).([]uint32))
	case []uint64:
		refTo(op, d, any(a).([]uint64), any(b).([]uint64))
	case []float32:
		refTo(op, d, any(a).([]float32), any(b).([]float32))
	case []float64:
		refTo(op, d, any(a).([]float64), any(b).([]float64))
	case []Float16:
		f16RefTo(op, d, any(a).([]Float16), any(b).([]Float16))
	case []BFloat16:
		bf16RefTo(op, d, any(a).([]BFloat16), any(b).([]BFloat16))
	case []int:
		reduceInts(op, d, any(a).([]int), any(b).([]int))
	case []uint:
		reduceUints(op, d, any(a).([]uint), any(b).([]uint))
	}
}
