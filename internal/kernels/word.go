package kernels

import (
	"strconv"
	"unsafe"
)

// int and uint, the word-sized integers, have no DType of their own: they
// are the fixed-size integers of their size (strconv.IntSize), int64 and
// uint64 on 64-bit platforms, int32 and uint32 on 32-bit ones. DTypeOf
// gives them that type's DType, in which they travel and reduce, and the
// generic functions run them as slices of that type. uintptr is left out:
// an address is nothing to reduce.

// word64 says whether int and uint have 64 bits.
const word64 = strconv.IntSize == 64

// reduceInts is ReduceTo for ints, as the fixed-size type of their size.
func reduceInts(op Op, dst, a, b []int) {
	if word64 {
		ReduceTo(op, view[int64](dst), view[int64](a), view[int64](b))
	} else {
		ReduceTo(op, view[int32](dst), view[int32](a), view[int32](b))
	}
}

// reduceUints is ReduceTo for uints, as the fixed-size type of their size.
func reduceUints(op Op, dst, a, b []uint) {
	if word64 {
		ReduceTo(op, view[uint64](dst), view[uint64](a), view[uint64](b))
	} else {
		ReduceTo(op, view[uint32](dst), view[uint32](a), view[uint32](b))
	}
}

// view is s as a slice of U, a type of T's size.
func view[U, T any](s []T) []U {
	return unsafe.Slice((*U)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
