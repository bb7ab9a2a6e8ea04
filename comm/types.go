package comm

import "github.com/gorun-hpc/gorun/internal/kernels"

// Float16 is an IEEE 754 half-precision number stored as its bits.
type Float16 = kernels.Float16

// BFloat16 is a bfloat16 number stored as its bits.
type BFloat16 = kernels.BFloat16

// Number is the set of element types the collectives accept. int and uint
// travel and reduce as int64 and uint64 (int32 and uint32 on 32-bit
// platforms; DTypeOf says which), so a rank's []int meets another's
// []int64, and a job of 32- and 64-bit processes disagrees on them
// (ErrMismatch).
type Number = kernels.Number

// Op is a reduction operator.
type Op = kernels.Op

// DType names an element type at run time.
type DType = kernels.DType

// The reduction operators. For Float16 and BFloat16 each rank reduces in
// float32 and rounds its partial result to the type, in which it travels
// (as in NCCL): a result can differ from a float32 sum by the rounding at
// each step, and so by algorithm.
const (
	Sum  = kernels.Sum
	Prod = kernels.Prod
	Min  = kernels.Min
	Max  = kernels.Max
	Avg  = kernels.Avg // Sum divided by Size (integer division for integers)

	// Integer types only: bitwise and, or, xor; logical and, or (non-zero
	// is true, the result is 0 or 1). A float type fails with ErrInvalid.
	BAnd = kernels.BAnd
	BOr  = kernels.BOr
	BXor = kernels.BXor
	LAnd = kernels.LAnd
	LOr  = kernels.LOr

	// Value-index pairs only (AllReduceLoc, ReduceLoc): the pair with the
	// smallest (largest) value, and of equal values the smallest index.
	MinLoc = kernels.MinLoc
	MaxLoc = kernels.MaxLoc
)

// F16From converts v to the nearest Float16.
func F16From(v float32) Float16 { return kernels.F16From(v) }

// BF16From converts v to the nearest BFloat16.
func BF16From(v float32) BFloat16 { return kernels.BF16From(v) }

// ToFloat64 converts any element type to float64 (for checks and reports).
func ToFloat64[T Number](v T) float64 { return kernels.ToFloat64(v) }

// DTypeOf returns the DType of T.
func DTypeOf[T Number]() DType { return kernels.DTypeOf[T]() }
