package kernels

// The integer-only ops: BAnd, BOr, BXor (bitwise) and LAnd, LOr (logical:
// non-zero is true, the result is 0 or 1), as MPI_BAND … MPI_LOR. They
// have no SIMD kernels: the compiler vectorises nothing here, but these ops
// are rare and small (flags, masks). On float types they leave dst as it
// is; callers refuse them first (IntegerOnly).

var extraOpNames = [...]string{"band", "bor", "bxor", "land", "lor", "minloc", "maxloc"}

// IntegerOnly reports whether op is defined on integer types only.
func (o Op) IntegerOnly() bool { return o >= BAnd && o <= LOr }

// Valid reports whether op is defined for element type dt: the arithmetic
// ops for every plain type, the bitwise and logical ones for integers,
// MinLoc and MaxLoc for pair types only.
func (o Op) Valid(dt DType) bool {
	switch {
	case dt.IsPair():
		return o == MinLoc || o == MaxLoc
	case o <= Avg:
		return dt.Size() > 0
	case o.IntegerOnly():
		return dt.IsInteger()
	}
	return false
}

// IsInteger reports whether d is one of the eight integer types.
func (d DType) IsInteger() bool { return d <= Uint64 }

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// reduceIntOps applies an op beyond Avg to dst = a op b.
func reduceIntOps[T Number](op Op, dst, a, b []T) {
	switch d := any(dst).(type) {
	case []int8:
		intRefTo(op, d, any(a).([]int8), any(b).([]int8))
	case []int16:
		intRefTo(op, d, any(a).([]int16), any(b).([]int16))
	case []int32:
		intRefTo(op, d, any(a).([]int32), any(b).([]int32))
	case []int64:
		intRefTo(op, d, any(a).([]int64), any(b).([]int64))
	case []uint8:
		intRefTo(op, d, any(a).([]uint8), any(b).([]uint8))
	case []uint16:
		intRefTo(op, d, any(a).([]uint16), any(b).([]uint16))
	case []uint32:
		intRefTo(op, d, any(a).([]uint32), any(b).([]uint32))
	case []uint64:
		intRefTo(op, d, any(a).([]uint64), any(b).([]uint64))
	case []int:
		reduceInts(op, d, any(a).([]int), any(b).([]int))
	case []uint:
		reduceUints(op, d, any(a).([]uint), any(b).([]uint))
	}
}

func intRefTo[T integer](op Op, dst, a, b []T) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case BAnd:
		for i := range dst {
			dst[i] = a[i] & b[i]
		}
	case BOr:
		for i := range dst {
			dst[i] = a[i] | b[i]
		}
	case BXor:
		for i := range dst {
			dst[i] = a[i] ^ b[i]
		}
	case LAnd:
		for i := range dst {
			dst[i] = boolTo[T](a[i] != 0 && b[i] != 0)
		}
	case LOr:
		for i := range dst {
			dst[i] = boolTo[T](a[i] != 0 || b[i] != 0)
		}
	}
}

func boolTo[T integer](v bool) T {
	if v {
		return 1
	}
	return 0
}
