package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorun-hpc/gorun/comm"
)

// step is one randomly chosen operation; every rank draws the same steps
// from the same seed.
type step struct {
	coll  string
	dtype string
	op    comm.Op
	count int // elements per rank (per block for the block collectives)
	root  int
	iter  int
}

var (
	colls  = []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier", "iallreduce"}
	dtypes = []string{"int8", "int32", "int64", "uint8", "uint16", "float32", "float64", "float16", "bfloat16"}
	ops    = []comm.Op{comm.Sum, comm.Prod, comm.Min, comm.Max, comm.Avg}
)

// draw picks the next step; counts are log-uniform in [1, maxCount].
func draw(rng *rand.Rand, iter, size, maxCount int) step {
	s := step{coll: colls[rng.IntN(len(colls))], dtype: dtypes[rng.IntN(len(dtypes))],
		op: ops[rng.IntN(len(ops))], root: rng.IntN(size), iter: iter}
	s.count = max(1, int(math.Exp(rng.Float64()*math.Log(float64(maxCount)))))
	return s
}

func (s step) String() string {
	return fmt.Sprintf("#%d %s %s op=%v count=%d root=%d", s.iter, s.coll, s.dtype, s.op, s.count, s.root)
}

// run executes s on c with element type T and checks the result.
func run(ctx context.Context, c *comm.Comm, s step) (bytes int, err error) {
	switch s.dtype {
	case "int8":
		return runT[int8](ctx, c, s)
	case "int32":
		return runT[int32](ctx, c, s)
	case "int64":
		return runT[int64](ctx, c, s)
	case "uint8":
		return runT[uint8](ctx, c, s)
	case "uint16":
		return runT[uint16](ctx, c, s)
	case "float32":
		return runT[float32](ctx, c, s)
	case "float64":
		return runT[float64](ctx, c, s)
	case "float16":
		return runT[comm.Float16](ctx, c, s)
	case "bfloat16":
		return runT[comm.BFloat16](ctx, c, s)
	}
	return 0, fmt.Errorf("unknown type %q", s.dtype)
}

// input is rank r's i-th element at step s: small integers, so that sums,
// products and averages of a few of them are exact in every type (bounded
// by 8 ranks for int8 products). Any rank can compute any rank's input.
func input(s step, r, i, size int) float64 {
	if s.op == comm.Prod {
		if (i+s.iter)%size == r {
			return 2
		}
		return 1
	}
	v := float64((s.iter*31 + r*7 + i*13) % 15)
	if s.dtype == "int8" || s.dtype == "int32" || s.dtype == "int64" || s.dtype == "float32" ||
		s.dtype == "float64" || s.dtype == "float16" || s.dtype == "bfloat16" {
		v -= 7 // signed types get negative values too
	}
	return v
}

// reduced is the reference of op over every rank's element i.
func reduced(s step, i, size int) float64 {
	acc := input(s, 0, i, size)
	for r := 1; r < size; r++ {
		v := input(s, r, i, size)
		switch s.op {
		case comm.Sum, comm.Avg:
			acc += v
		case comm.Prod:
			acc *= v
		case comm.Min:
			acc = math.Min(acc, v)
		case comm.Max:
			acc = math.Max(acc, v)
		}
	}
	if s.op == comm.Avg {
		acc /= float64(size)
		if !isFloat(s.dtype) {
			acc = math.Trunc(acc) // integer Avg divides as Go does
		}
	}
	return acc
}

func isFloat(d string) bool {
	return d == "float32" || d == "float64" || d == "float16" || d == "bfloat16"
}

func fromF[T comm.Number](f float64) T {
	var z T
	switch any(z).(type) {
	case comm.Float16:
		return any(comm.F16From(float32(f))).(T)
	case comm.BFloat16:
		return any(comm.BF16From(float32(f))).(T)
	case int8:
		return any(int8(f)).(T)
	case int16:
		return any(int16(f)).(T)
	case int32:
		return any(int32(f)).(T)
	case int64:
		return any(int64(f)).(T)
	case uint8:
		return any(uint8(f)).(T)
	case uint16:
		return any(uint16(f)).(T)
	case uint32:
		return any(uint32(f)).(T)
	case uint64:
		return any(uint64(f)).(T)
	case float32:
		return any(float32(f)).(T)
	}
	return any(f).(T)
}

// same compares a result with its reference: exactly for integers, to a
// relative 1e-6 for float32/64 and 2e-2 for the 16-bit floats.
func same(dtype string, got, want float64) bool {
	if got == want {
		return true
	}
	tol := 0.0
	switch dtype {
	case "float32", "float64":
		tol = 1e-6
	case "float16", "bfloat16":
		tol = 2e-2
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func fill[T comm.Number](s step, r, n, size, off int) []T {
	b := make([]T, n)
	for i := range b {
		b[i] = fromF[T](input(s, r, off+i, size))
	}
	return b
}
