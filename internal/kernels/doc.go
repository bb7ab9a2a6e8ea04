// Package kernels holds gorun's reduction kernels: dst[i] = dst[i] op src[i]
// for every element type and op, a portable Go reference, and SIMD paths
// chosen at start-up. It also defines the element types (Float16, BFloat16)
// and ops that package comm re-exports.
//
// Kernels are pure functions of their slices; they are safe for concurrent
// use on disjoint memory and never allocate.
package kernels
