package kernels

import (
	"fmt"
	"math"
	"unsafe"
)

// Float16 is an IEEE 754 half-precision number (fp16), stored as its bits.
type Float16 uint16

// BFloat16 is a bfloat16 number (the top half of a float32), stored as its bits.
type BFloat16 uint16

// Number is every element type the collectives accept. The terms are exact
// types, so Float16 and uint16 stay distinct. int and uint are the
// fixed-size integers of their size (word.go).
type Number interface {
	int8 | int16 | int32 | int64 |
		uint8 | uint16 | uint32 | uint64 |
		int | uint |
		float32 | float64 | Float16 | BFloat16
}

// Op is a reduction operator.
type Op uint8

const (
	Sum Op = iota
	Prod
	Min
	Max
	Avg // Sum, then divided by the number of contributions (by the caller)
	// The integer-only ops (ops_int.go): bitwise and, or, xor; logical and,
	// or (non-zero is true; the result is 0 or 1).
	BAnd
	BOr
	BXor
	LAnd
	LOr
	// The value-index ops, on pair types only (PairOf, pairs.go).
	MinLoc
	MaxLoc
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Min:
		return "min"
	case Max:
		return "max"
	case Avg:
		return "avg"
	}
	if int(o) < len(extraOpNames)+int(BAnd) && o >= BAnd {
		return extraOpNames[o-BAnd]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// DType names an element type at run time (wire headers, the C ABI).
type DType uint8

const (
	Int8 DType = iota
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float32
	Float64
	F16
	BF16
)

var dtypeNames = [...]string{"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "float16", "bfloat16",
	12: "", "", "", "",
	pairBase: "(int8,index)", "(int16,index)", "(int32,index)", "(int64,index)", "(uint8,index)", "(uint16,index)",
	"(uint32,index)", "(uint64,index)", "(float32,index)", "(float64,index)", "(float16,index)", "(bfloat16,index)"}

// dtypeSizes are the element sizes; a pair's is its Go struct's, which is
// its C struct's (pairs.go): 16 bytes on 64-bit platforms, 12 on 32-bit
// ones for values of 4 bytes or fewer (int64_t aligns to 4 there).
var dtypeSizes = [...]int{1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 2, 2,
	pairBase: int(unsafe.Sizeof(Pair[int8]{})), int(unsafe.Sizeof(Pair[int16]{})),
	int(unsafe.Sizeof(Pair[int32]{})), int(unsafe.Sizeof(Pair[int64]{})),
	int(unsafe.Sizeof(Pair[uint8]{})), int(unsafe.Sizeof(Pair[uint16]{})),
	int(unsafe.Sizeof(Pair[uint32]{})), int(unsafe.Sizeof(Pair[uint64]{})),
	int(unsafe.Sizeof(Pair[float32]{})), int(unsafe.Sizeof(Pair[float64]{})),
	int(unsafe.Sizeof(Pair[Float16]{})), int(unsafe.Sizeof(Pair[BFloat16]{}))}

func (d DType) String() string {
	if int(d) < len(dtypeNames) && dtypeNames[d] != "" {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// DTypeOf returns the DType of T.
func DTypeOf[T Number]() DType {
	var z T
	switch any(z).(type) {
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case Float16:
		return F16
	case BFloat16:
		return BF16
	case int:
		if word64 {
			return Int64
		}
		return Int32
	case uint:
		if word64 {
			return Uint64
		}
		return Uint32
	}
	panic("kernels: unreachable: Number type without a DType") // the constraint lists exactly these
}

// Float32 converts f to float32 exactly.
func (f Float16) Float32() float32 {
	h := uint32(f)
	sign := (h >> 15) << 31
	exp := (h >> 10) & 0x1f
	man := h & 0x3ff
	switch {
	case exp == 0x1f: // inf or nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // zero
		return math.Float32frombits(sign)
	}
	// subnormal: normalise
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// F16From converts v to the nearest Float16 (round to nearest even).
func F16From(v float32) Float16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // inf, nan (keep a quiet nan)
		if man != 0 {
			return Float16(sign | 0x7e00)
		}
		return Float16(sign | 0x7c00)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return Float16(sign | 0x7c00)
	}
	if e <= 0 {
		if e < -10 {
			return Float16(sign)
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return Float16(sign | uint16(r))
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, giving inf correctly
	}
	return Float16(sign | uint16(r))
}

// Float32 converts f to float32 exactly.
func (f BFloat16) Float32() float32 { return math.Float32frombits(uint32(f) << 16) }

// BF16From converts v to the nearest BFloat16 (round to nearest even).
func BF16From(v float32) BFloat16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 { // nan: keep it a quiet nan
		return BFloat16(b>>16 | 0x40)
	}
	b += 0x7fff + (b>>16)&1
	return BFloat16(b >> 16)
}

// ToFloat64 converts v to float64 (exactly, except int64 and uint64 beyond
// 2^53), for references and reports.
func ToFloat64[T Number](v T) float64 {
	switch x := any(v).(type) {
	case Float16:
		return float64(x.Float32())
	case BFloat16:
		return float64(x.Float32())
	case float32:
		return float64(x)
	case float64:
		return x
	case int8:
		return float64(x)
	case int16:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint8:
		return float64(x)
	case uint16:
		return float64(x)
	case uint32:
		return float64(x)
	case uint64:
		return float64(x)
	case int:
		return float64(x)
	case uint:
		return float64(x)
	}
	panic("kernels: unreachable: Number type without a conversion") // the constraint lists exactly these
}
