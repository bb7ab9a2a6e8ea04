package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"
	"unsafe"

	"github.com/gorun-hpc/gorun/comm"
)

// perf runs the size sweep on one rank; rank 0's w gets the table.
func perf[T comm.Number](ctx context.Context, c *comm.Comm, o options, op comm.Op, w io.Writer) (int64, error) {
	var z T
	es := int64(unsafe.Sizeof(z))
	n := c.Size()
	fmt.Fprintf(w, "# gorun allreduce_perf: %s, %d ranks, type %s, op %s, algorithm %s, GOMAXPROCS %d\n", o.coll, n, o.dtype, o.redop(), orDefault(o.algo, "auto"), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "#\n#%52s %31s %31s\n", "", "out-of-place", "in-place")
	fmt.Fprintf(w, "#%12s %12s %8s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(w, "#%12s %12s %8s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	var total int64
	var sumBus float64
	var rows int
	gather, scatter := o.coll == "allgather", o.coll == "reducescatter"
	for _, size := range o.sizeList() {
		count := int(size / es)
		// As nccl-tests: size is the gathered output of an allgather and
		// the input of a reduce-scatter, n blocks of count/n elements;
		// each rank sends (allgather) or keeps (reduce-scatter) one.
		block := count / n
		if gather || scatter {
			count = block * n
		}
		send, recv := make([]T, count), make([]T, count)
		// The rank's input, made once: refilling with fill per iteration is
		// slower than the collective itself and would be timed on the
		// peers waiting for this rank.
		input := make([]T, count)
		if o.coll != "broadcast" || c.Rank() == 0 {
			fill(input, c.Rank(), op)
		}
		mine := input[c.Rank()*block : (c.Rank()+1)*block] // an allgather's block
		if gather {
			fillGather(mine, c.Rank(), block, op)
		}
		var res [2]struct {
			us    float64
			wrong int64
		}
		for mode := range 2 { // 0 out of place, 1 in place
			dst := recv
			if mode == 1 {
				dst = send
			}
			// In place, an allgather's send is recv's own block and a
			// reduce-scatter's recv is send's, as MPI_IN_PLACE and
			// nccl-tests have them.
			gsend, srecv := send[:block], recv[:block]
			if mode == 1 {
				gsend, srecv = recv[c.Rank()*block:(c.Rank()+1)*block], send[c.Rank()*block:(c.Rank()+1)*block]
			}
			reset := func() {
				if gather {
					copy(gsend, mine)
				} else {
					copy(send, input)
				}
			}
			call := func() error {
				switch {
				case o.coll == "broadcast":
					return comm.Broadcast(ctx, c, send, 0)
				case gather:
					return comm.AllGather(ctx, c, gsend, recv)
				case scatter:
					return comm.ReduceScatter(ctx, c, send, srecv, op)
				}
				return comm.AllReduce(ctx, c, send, dst, op)
			}
			var err error
			if o.batch {
				res[mode].us, err = timeBatch(ctx, c, o, reset, call)
			} else {
				res[mode].us, err = timeEach(ctx, c, o, reset, call)
			}
			if err != nil {
				return total, err
			}
			res[mode].us /= float64(o.iters)
			if o.check {
				switch {
				case o.coll == "broadcast":
					res[mode].wrong = countWrongBcast(send, op)
				case gather:
					res[mode].wrong = countWrongGather(recv, block, op)
				case scatter:
					res[mode].wrong = countWrongAt(srecv, c.Rank()*block, n, op)
				default:
					res[mode].wrong = countWrong(dst, n, op)
				}
			}
			// the slowest rank's time, every rank's wrong elements
			t := []float64{res[mode].us}
			if err := comm.AllReduce(ctx, c, t, t, comm.Max); err != nil {
				return total, err
			}
			wr := []int64{res[mode].wrong}
			if err := comm.AllReduce(ctx, c, wr, wr, comm.Sum); err != nil {
				return total, err
			}
			res[mode].us, res[mode].wrong = t[0], wr[0]
			total += wr[0]
		}
		algbw := func(us float64) float64 {
			if us <= 0 {
				return 0
			}
			return float64(int64(count)*es) / us / 1e3
		}
		factor := 2 * float64(n-1) / float64(n)
		switch {
		case o.coll == "broadcast":
			factor = 1
		case gather || scatter:
			factor = float64(n-1) / float64(n)
		}
		fmt.Fprintf(w, " %12d %12d %8s %6s %9.2f %7.2f %7.2f %6d %9.2f %7.2f %7.2f %6d\n",
			int64(count)*es, count, o.dtype, o.redop(),
			res[0].us, algbw(res[0].us), algbw(res[0].us)*factor, res[0].wrong,
			res[1].us, algbw(res[1].us), algbw(res[1].us)*factor, res[1].wrong)
		sumBus += algbw(res[1].us) * factor
		rows++
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", total, map[bool]string{true: "OK", false: "FAILED"}[total == 0])
	if rows > 0 {
		fmt.Fprintf(w, "# Avg bus bandwidth    : %.4f\n#\n", sumBus/float64(rows))
	}
	return total, nil
}

// timeBatch times o.iters calls back to back after o.warmup ones and a
// barrier, as nccl-tests does, and returns their µs in all; then it resets
// the buffers and calls once more, for the check.
func timeBatch(ctx context.Context, c *comm.Comm, o options, reset func(), call func() error) (float64, error) {
	reset()
	for range o.warmup {
		if err := call(); err != nil {
			return 0, err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	for range o.iters {
		if err := call(); err != nil {
			return 0, err
		}
	}
	us := time.Since(start).Seconds() * 1e6
	reset()
	return us, call()
}

// timeEach times each of o.iters calls (after o.warmup untimed ones) from
// a barrier, every call from the reset buffers, as the MPI and Gloo
// programs of bench/compare do, and returns their µs in all.
func timeEach(ctx context.Context, c *comm.Comm, o options, reset func(), call func() error) (float64, error) {
	var us float64
	for i := range o.warmup + o.iters {
		reset()
		if err := c.Barrier(ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := call(); err != nil {
			return 0, err
		}
		if i >= o.warmup {
			us += time.Since(start).Seconds() * 1e6
		}
	}
	return us, nil
}

// sizeList is -sizes, or -b to -e by factors of -f.
func (o options) sizeList() []int64 {
	if len(o.sizes) > 0 {
		return o.sizes
	}
	var s []int64
	for size := o.minBytes; size <= o.maxBytes; size *= int64(o.factor) {
		s = append(s, size)
		if size == 0 {
			break
		}
	}
	return s
}

// countWrongBcast counts the elements of buf that differ from root 0's.
func countWrongBcast[T comm.Number](buf []T, op comm.Op) int64 {
	var wrong int64
	for i, v := range buf {
		if comm.ToFloat64(v) != comm.ToFloat64(from[T](value(0, i, op))) {
			wrong++
		}
	}
	return wrong
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// value is rank r's element i: small integers, so every type and op gives
// an exact, known result.
func value(r, i int, op comm.Op) int {
	if op == comm.Prod {
		if (r+i)%8 == 0 {
			return 2
		}
		return 1
	}
	return (r+i)%3 + 1
}

func expect(n, i int, op comm.Op) float64 {
	acc := float64(value(0, i, op))
	for r := 1; r < n; r++ {
		v := float64(value(r, i, op))
		switch op {
		case comm.Sum, comm.Avg:
			acc += v
		case comm.Prod:
			acc *= v
		case comm.Min:
			acc = min(acc, v)
		case comm.Max:
			acc = max(acc, v)
		}
	}
	return acc
}

func fill[T comm.Number](buf []T, r int, op comm.Op) {
	for i := range buf {
		buf[i] = from[T](value(r, i, op))
	}
}

// fillGather fills rank r's block of an allgather: the elements r·block
// on of the gathered result (countWrongGather).
func fillGather[T comm.Number](buf []T, r, block int, op comm.Op) {
	for i := range buf {
		buf[i] = from[T](value(r, r*block+i, op))
	}
}

// countWrongGather counts the elements of an allgather's result that are
// not their rank's (fillGather).
func countWrongGather[T comm.Number](buf []T, block int, op comm.Op) int64 {
	var wrong int64
	for i, v := range buf {
		if comm.ToFloat64(v) != comm.ToFloat64(from[T](value(i/block, i, op))) {
			wrong++
		}
	}
	return wrong
}

func countWrong[T comm.Number](buf []T, n int, op comm.Op) int64 {
	return countWrongAt(buf, 0, n, op)
}

// countWrongAt counts the elements of buf, the reduced elements off on,
// that are not the reduction of every rank's input (fill).
func countWrongAt[T comm.Number](buf []T, off, n int, op comm.Op) int64 {
	var wrong int64
	for i, v := range buf {
		want := expect(n, off+i, op)
		got := comm.ToFloat64(v)
		if op == comm.Avg {
			if isInt[T]() {
				want = float64(int64(want) / int64(n))
			} else {
				want /= float64(n)
			}
		}
		tol := 0.0
		if op == comm.Avg && !isInt[T]() {
			tol = 1e-2 * want // fp16/bf16 rounding of the quotient
		}
		if d := got - want; d > tol || d < -tol {
			wrong++
		}
	}
	return wrong
}

func isInt[T comm.Number]() bool {
	switch any(*new(T)).(type) {
	case float32, float64, comm.Float16, comm.BFloat16:
		return false
	}
	return true
}

func from[T comm.Number](v int) T {
	var z T
	switch any(z).(type) {
	case comm.Float16:
		return any(comm.F16From(float32(v))).(T)
	case comm.BFloat16:
		return any(comm.BF16From(float32(v))).(T)
	}
	return fromNative[T](v)
}

func fromNative[T comm.Number](v int) T {
	var z T
	switch any(z).(type) {
	case int8:
		return any(int8(v)).(T)
	case int16:
		return any(int16(v)).(T)
	case int32:
		return any(int32(v)).(T)
	case int64:
		return any(int64(v)).(T)
	case uint8:
		return any(uint8(v)).(T)
	case uint16:
		return any(uint16(v)).(T)
	case uint32:
		return any(uint32(v)).(T)
	case uint64:
		return any(uint64(v)).(T)
	case float32:
		return any(float32(v)).(T)
	case float64:
		return any(float64(v)).(T)
	}
	return z
}

// perfBarrier times Barrier alone, as the MPI and Gloo programs of
// bench/compare do: a barrier to line the ranks up, then the timed one. It
// prints one row of size 0 in the table's columns (both modes alike).
func perfBarrier(ctx context.Context, c *comm.Comm, o options, _ comm.Op, w io.Writer) (int64, error) {
	fmt.Fprintf(w, "# gorun allreduce_perf: barrier, %d ranks, GOMAXPROCS %d\n", c.Size(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "#%12s %12s %8s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	var us float64
	for i := 0; i < o.warmup+o.iters; i++ {
		if err := c.Barrier(ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := c.Barrier(ctx); err != nil {
			return 0, err
		}
		if i >= o.warmup {
			us += time.Since(start).Seconds() * 1e6
		}
	}
	t := []float64{us / float64(o.iters)}
	if err := comm.AllReduce(ctx, c, t, t, comm.Max); err != nil { // the slowest rank's time
		return 0, err
	}
	fmt.Fprintf(w, " %12d %12d %8s %6s %9.2f %7.2f %7.2f %6d %9.2f %7.2f %7.2f %6d\n", 0, 0, "none", "none", t[0], 0.0, 0.0, 0, t[0], 0.0, 0.0, 0)
	fmt.Fprintf(w, "# Out of bounds values : 0 OK\n#\n")
	return 0, nil
}
