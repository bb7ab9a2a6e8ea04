package comm

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
)

// TestIntAndUint runs []int and []uint through reductions (arithmetic,
// bitwise, value-index), a v-collective each way and point-to-point
// messages, with values beyond 32 bits where int has 64: they travel and
// reduce as int64 and uint64 there (int32 and uint32 on 32-bit platforms),
// so a rank's []int meets another's []int64. The matrices of
// collectives_test.go and vector_test.go cover them with small values.
func TestIntAndUint(t *testing.T) {
	ctx := testCtx(t)
	const n = 3
	cs := newLocal(t, n)
	shift := 20
	if strconv.IntSize == 64 {
		shift = 40
	}
	big := 1 << shift
	ints := func(r int) []int { return []int{big + r, -big * (r + 1), r - 1, big | 1<<r} }
	uints := func(r int) []uint { return []uint{math.MaxUint - uint(r), uint(big) << r, uint(r), 1 << r} }
	reduce := func(f func(a, b int) int) []int {
		acc := ints(0)
		for r := 1; r < n; r++ {
			for i, v := range ints(r) {
				acc[i] = f(acc[i], v)
			}
		}
		return acc
	}
	ureduce := func(f func(a, b uint) uint) []uint {
		acc := uints(0)
		for r := 1; r < n; r++ {
			for i, v := range uints(r) {
				acc[i] = f(acc[i], v)
			}
		}
		return acc
	}
	intCases := map[Op][]int{
		Sum: reduce(func(a, b int) int { return a + b }),
		Max: reduce(func(a, b int) int { return max(a, b) }), Min: reduce(func(a, b int) int { return min(a, b) }),
		BAnd: reduce(func(a, b int) int { return a & b }), BOr: reduce(func(a, b int) int { return a | b }),
		BXor: reduce(func(a, b int) int { return a ^ b }),
	}
	uintCases := map[Op][]uint{
		Sum: ureduce(func(a, b uint) uint { return a + b }),
		Max: ureduce(func(a, b uint) uint { return max(a, b) }), Min: ureduce(func(a, b uint) uint { return min(a, b) }),
		BAnd: ureduce(func(a, b uint) uint { return a & b }), BOr: ureduce(func(a, b uint) uint { return a | b }),
		BXor: ureduce(func(a, b uint) uint { return a ^ b }),
	}
	ops := []Op{Sum, Max, Min, BAnd, BOr, BXor}
	mustAll(t, "reductions", onAll(cs, func(c *Comm) error {
		for _, op := range ops { // in the same order on every rank
			want := intCases[op]
			got := make([]int, len(want))
			if err := AllReduce(ctx, c, ints(c.Rank()), got, op); err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("AllReduce of ints with %v: %v, want %v", op, got, want)
			}
		}
		for _, op := range ops {
			want := uintCases[op]
			got := uints(c.Rank())
			if err := AllReduce(ctx, c, got, got, op); err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("AllReduce of uints with %v: %v, want %v", op, got, want)
			}
		}
		// MaxLoc beyond 2^53, where a float64 comparison ties the values.
		vi := []ValueIndex[int]{{Value: math.MaxInt - c.Rank(), Index: int64(c.Rank())}}
		if err := AllReduceLoc(ctx, c, vi, vi, MaxLoc); err != nil {
			return err
		}
		if vi[0].Value != math.MaxInt || vi[0].Index != 0 {
			return fmt.Errorf("AllReduceLoc of ints with MaxLoc: %+v, want {%d 0}", vi[0], math.MaxInt)
		}
		return nil
	}))

	mustAll(t, "v-collectives and messages", onAll(cs, func(c *Comm) error {
		r := c.Rank()
		// AllGatherV: rank q sends q+1 ints.
		counts := []int{1, 2, 3}
		mine := slices.Repeat([]int{-big - r}, r+1)
		all := make([]int, 6)
		if err := AllGatherV(ctx, c, mine, all, counts, nil); err != nil {
			return err
		}
		if want := []int{-big, -big - 1, -big - 1, -big - 2, -big - 2, -big - 2}; !slices.Equal(all, want) {
			return fmt.Errorf("AllGatherV of ints: %v, want %v", all, want)
		}
		// AllToAllV: rank q sends rank p the uint big<<q + p, once.
		ones := []int{1, 1, 1}
		send := make([]uint, n)
		for p := range send {
			send[p] = uint(big)<<r + uint(p)
		}
		recv := make([]uint, n)
		if err := AllToAllV(ctx, c, send, ones, nil, recv, ones, nil); err != nil {
			return err
		}
		for q, v := range recv {
			if want := uint(big)<<q + uint(r); v != want {
				return fmt.Errorf("AllToAllV of uints: from rank %d %d, want %d", q, v, want)
			}
		}
		// Send and Recv from rank 0 to 1, ISend and IRecv from 1 to 2.
		switch r {
		case 0:
			return Send(ctx, c, ints(0), 1, 5)
		case 1:
			got := make([]int, 4)
			if err := Recv(ctx, c, got, 0, 5); err != nil {
				return err
			}
			if !slices.Equal(got, ints(0)) {
				return fmt.Errorf("Recv of ints: %v, want %v", got, ints(0))
			}
			return ISend(ctx, c, uints(1), 2, 6).Wait(ctx)
		default:
			got := make([]uint, 4)
			if err := IRecv(ctx, c, got, 1, 6).Wait(ctx); err != nil {
				return err
			}
			if !slices.Equal(got, uints(1)) {
				return fmt.Errorf("IRecv of uints: %v, want %v", got, uints(1))
			}
		}
		return nil
	}))

	// int is int64 where it has 64 bits: a rank's []int and another's
	// []int64 are the same call.
	if strconv.IntSize == 64 {
		mustAll(t, "int against int64", onAll(cs, func(c *Comm) error {
			if c.Rank() == 0 {
				b := []int64{int64(big)}
				if err := AllReduce(ctx, c, b, b, Sum); err != nil || b[0] != int64(n*big) {
					return fmt.Errorf("AllReduce of int64s: %v, %v; want %d", b, err, n*big)
				}
				return nil
			}
			b := []int{big}
			if err := AllReduce(ctx, c, b, b, Sum); err != nil || b[0] != n*big {
				return fmt.Errorf("AllReduce of ints: %v, %v; want %d", b, err, n*big)
			}
			return nil
		}))
	}
}
