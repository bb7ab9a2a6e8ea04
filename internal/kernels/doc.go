// Package kernels holds gorun's reduction kernels: dst[i] = dst[i] op src[i]
// (Reduce) and dst[i] = a[i] op b[i] (ReduceTo) for every element type and
// op, a portable Go reference, and SIMD paths chosen at start-up. It also
// defines the element types (Float16, BFloat16) and ops that package comm
// re-exports.
//
// SIMD: on amd64, float32, float64, Float16, BFloat16 and int32 have AVX2
// and AVX-512 kernels for Sum, Prod, Min and Max (Avg is Sum); int64 has
// them for Sum, Min and Max, and Prod on AVX-512 only. Float16 converts
// with F16C (VCVTPH2PS/VCVTPS2PH), BFloat16 with shifts, both rounding to
// nearest even once per element, as the reference does. The best level the
// CPU has is used (Level names it); the kernels are written by asmgen
// (go generate) into reduce_amd64.s and kernels_amd64.go. Building with
// -tags noasm, or for another architecture, leaves only the reference.
//
// Semantics shared by every path: integer Sum and Prod wrap; Min and Max
// propagate NaN (a NaN in either operand gives a NaN; payloads are not
// preserved) and keep dst's (a's) operand when the two compare equal, as
// for +0 and −0.
//
// Ownership and concurrency: kernels are pure functions of their slices;
// they are safe for concurrent use on disjoint memory and never allocate.
// dst may be the same slice as an operand but must not partly overlap one.
package kernels
