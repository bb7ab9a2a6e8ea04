package kernels

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
	case []int:
		divInts(d, n)
	case []uint:
		divInts(d, n)
	}
}

func divInts[T ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~int | ~uint](d []T, n int) {
	for i := range d {
		d[i] /= T(n)
	}
}
