package comm

import (
	"context"
	"fmt"
	"testing"
)

// The correctness matrix. Every collective × algorithm × element type × op
// runs against a serial reference (exact for integers, Min, Max and Prod;
// float sums within n·eps·Σ|x|), in place and out of place:
//
//   - TestCollectivesFull: world sizes 1, 2, 3, 4, 5, 7, 8; every algorithm,
//     all 14 element types (int and uint too), all 5 ops; counts 0, 1,
//     n-1, n+1, 1000.
//   - TestCollectivesSampled: 16 ranks, every algorithm, sampled types
//     (float32, int64, bfloat16) and ops (Sum, Max, Avg), counts 0, 1, 15,
//     17, 1000; 64 ranks, every algorithm with float32 Sum on allreduce,
//     broadcast and allgather (counts 63, 1000), and int64 Max on every
//     collective (count 65).
//   - TestCollectivesLarge (not in -short): 1 Mi elements at 4 and 8 ranks,
//     allreduce (float32 Sum, bfloat16 Avg) and broadcast, every algorithm.

// worldSpecs force each algorithm once: reduce, scatter, gather, alltoall
// and reducescatter have one algorithm each, so any world covers them.
var worldSpecs = []struct {
	spec string
	only string // "" = every collective, else just this one
}{
	{"allreduce:ring,broadcast:tree,allgather:ring", ""},
	{"allreduce:tree,broadcast:chain,allgather:bruck", "bcast+allgather+allreduce"},
	{"allreduce:rd", "allreduce"},
	{"allreduce:hd", "allreduce"},
}

type typeCase struct {
	name string
	run  func(t *testing.T, cs []*Comm, counts []int, ops []Op, only string)
}

func tc[T Number](name string) typeCase {
	return typeCase{name, func(t *testing.T, cs []*Comm, counts []int, ops []Op, only string) {
		exercise[T](t, cs, counts, ops, only)
	}}
}

var allTypes = []typeCase{
	tc[int8]("int8"), tc[int16]("int16"), tc[int32]("int32"), tc[int64]("int64"),
	tc[uint8]("uint8"), tc[uint16]("uint16"), tc[uint32]("uint32"), tc[uint64]("uint64"),
	tc[float32]("float32"), tc[float64]("float64"), tc[Float16]("float16"), tc[BFloat16]("bfloat16"),
	tc[int]("int"), tc[uint]("uint"),
}

var sampledTypes = []typeCase{tc[float32]("float32"), tc[int64]("int64"), tc[BFloat16]("bfloat16")}

var allOps = []Op{Sum, Prod, Min, Max, Avg}

func countsFor(n int) []int {
	return []int{0, 1, n - 1, n + 1, 1000}
}

func TestCollectivesFull(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8} {
		for _, w := range worldSpecs {
			cs := newLocal(t, n, WithAlgorithm(w.spec))
			for _, ty := range allTypes {
				t.Run(fmt.Sprintf("n=%d/%s/%s", n, w.spec, ty.name), func(t *testing.T) {
					ty.run(t, cs, countsFor(n), allOps, w.only)
				})
			}
		}
	}
}

func TestCollectivesSampled(t *testing.T) {
	for _, w := range worldSpecs {
		cs := newLocal(t, 16, WithAlgorithm(w.spec))
		for _, ty := range sampledTypes {
			t.Run(fmt.Sprintf("n=16/%s/%s", w.spec, ty.name), func(t *testing.T) {
				ty.run(t, cs, countsFor(16), []Op{Sum, Max, Avg}, w.only)
			})
		}
		for _, c := range cs {
			c.Close()
		}
	}
	// 64 ranks: every algorithm with float32 Sum on the collectives that
	// have several algorithms; int64 Max on every collective once.
	for i, w := range worldSpecs {
		cs := newLocal(t, 64, WithAlgorithm(w.spec))
		only := "bcast+allgather+allreduce"
		if w.only != "" {
			only = w.only
		}
		t.Run(fmt.Sprintf("n=64/%s/float32", w.spec), func(t *testing.T) {
			exercise[float32](t, cs, []int{63, 1000}, []Op{Sum}, only)
		})
		if i == 0 {
			t.Run(fmt.Sprintf("n=64/%s/int64", w.spec), func(t *testing.T) {
				exercise[int64](t, cs, []int{65}, []Op{Max}, "")
			})
		}
		for _, c := range cs {
			c.Close()
		}
	}
}

func TestCollectivesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("1 Mi elements: not in -short")
	}
	for _, n := range []int{4, 8} {
		for i, w := range worldSpecs {
			if raceEnabled && (n != 4 || i != 0) {
				continue // under -race: ring at 4 ranks only
			}
			cs := newLocal(t, n, WithAlgorithm(w.spec))
			t.Run(fmt.Sprintf("n=%d/%s/float32", n, w.spec), func(t *testing.T) {
				exercise[float32](t, cs, []int{1 << 20}, []Op{Sum}, "allreduce+broadcast")
			})
			t.Run(fmt.Sprintf("n=%d/%s/bfloat16", n, w.spec), func(t *testing.T) {
				if raceEnabled {
					t.Skip("under -race: float32 only")
				}
				exercise[BFloat16](t, cs, []int{1 << 20}, []Op{Avg}, "allreduce")
			})
			for _, c := range cs {
				c.Close()
			}
		}
	}
}

func wants(only, what string) bool {
	if only == "" {
		return true
	}
	for _, w := range []string{only} {
		if w == what || (w == "bcast+allgather+allreduce" && (what == "broadcast" || what == "allgather" || what == "allreduce")) ||
			(w == "allreduce+broadcast" && (what == "broadcast" || what == "allreduce")) {
			return true
		}
	}
	return false
}

// exercise runs the collectives selected by only on cs with element type T;
// every rank checks its own results.
func exercise[T Number](t *testing.T, cs []*Comm, counts []int, ops []Op, only string) {
	ctx := testCtx(t)
	for ci, count := range counts {
		errs := onAll(cs, func(c *Comm) error { return rankRound[T](ctx, c, ci, count, ops, only) })
		mustAll(t, fmt.Sprintf("count=%d", count), errs)
	}
}

// rankRound is one rank's part of a round of collectives on count elements
// (round ci picks in place or not, and the root); it checks this rank's
// results against the serial reference.
func rankRound[T Number](ctx context.Context, c *Comm, ci, count int, ops []Op, only string) error {
	n, r := c.Size(), c.Rank()
	inPlace := ci%2 == 0
	root := (count + ci) % n
	for _, op := range ops {
		if wants(only, "allreduce") {
			send := make([]T, count)
			for i := range send {
				send[i] = gen[T](r, i, op)
			}
			recv := send
			if !inPlace {
				// recv starts as garbage and send must come back
				// unchanged: the schedule reads send until it has
				// written recv (collectives.ReadInput).
				recv = make([]T, count)
				for i := range bytesOf(recv) {
					bytesOf(recv)[i] = 0x5a
				}
			}
			if err := AllReduce(ctx, c, send, recv, op); err != nil {
				return err
			}
			if err := checkReduced(n, op, 0, recv); err != nil {
				return fmt.Errorf("allreduce op=%s in-place=%v: %w", op, inPlace, err)
			}
			if !inPlace {
				for i := range send {
					if want := gen[T](r, i, op); send[i] != want && !(send[i] != send[i] && want != want) {
						return fmt.Errorf("allreduce op=%s: send[%d] changed to %v from %v", op, i, send[i], want)
					}
				}
			}
		}
		if wants(only, "reducescatter") {
			send := make([]T, n*count)
			for i := range send {
				send[i] = gen[T](r, i, op)
			}
			recv := make([]T, count)
			if err := ReduceScatter(ctx, c, send, recv, op); err != nil {
				return err
			}
			if err := checkReduced(n, op, r*count, recv); err != nil {
				return fmt.Errorf("reducescatter op=%s: %w", op, err)
			}
		}
		if wants(only, "reduce") {
			send := make([]T, count)
			for i := range send {
				send[i] = gen[T](r, i, op)
			}
			var recv []T
			if r == root {
				recv = make([]T, count)
				if inPlace {
					copy(recv, send)
					send = recv
				}
			}
			if err := Reduce(ctx, c, send, recv, op, root); err != nil {
				return err
			}
			if r == root {
				if err := checkReduced(n, op, 0, recv); err != nil {
					return fmt.Errorf("reduce op=%s root=%d: %w", op, root, err)
				}
			}
		}
	}
	return moveData[T](ctx, c, count, root, only)
}

func checkBits[T Number](what string, got []T, want func(i int) T) error {
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%s: element %d = %v, want %v", what, i, g, w)
		}
	}
	return nil
}

// moveData is one rank's part of the data-movement collectives, checked
// bit for bit.
func moveData[T Number](ctx context.Context, c *Comm, count, root int, only string) error {
	n, r := c.Size(), c.Rank()
	blk := max(count, 1)
	if wants(only, "broadcast") {
		buf := make([]T, count)
		if r == root {
			for i := range buf {
				buf[i] = pattern[T](root, i)
			}
		}
		if err := Broadcast(ctx, c, buf, root); err != nil {
			return err
		}
		if err := checkBits("broadcast", buf, func(i int) T { return pattern[T](root, i) }); err != nil {
			return err
		}
	}
	if wants(only, "allgather") {
		recv := make([]T, n*count)
		send := make([]T, count)
		if count%2 == 1 { // in place: send is recv's own block
			send = recv[r*count : (r+1)*count]
		}
		for i := range send {
			send[i] = pattern[T](r, i)
		}
		if err := AllGather(ctx, c, send, recv); err != nil {
			return err
		}
		if err := checkBits("allgather", recv, func(i int) T { return pattern[T](i/blk, i%blk) }); err != nil {
			return err
		}
	}
	if wants(only, "gather") {
		send := make([]T, count)
		for i := range send {
			send[i] = pattern[T](r, i)
		}
		var recv []T
		if r == root {
			recv = make([]T, n*count)
		}
		if err := Gather(ctx, c, send, recv, root); err != nil {
			return err
		}
		if err := checkBits("gather", recv, func(i int) T { return pattern[T](i/blk, i%blk) }); err != nil {
			return err
		}
	}
	if wants(only, "scatter") {
		var send []T
		if r == root {
			send = make([]T, n*count)
			for i := range send {
				send[i] = pattern[T](root, i)
			}
		}
		recv := make([]T, count)
		if err := Scatter(ctx, c, send, recv, root); err != nil {
			return err
		}
		if err := checkBits("scatter", recv, func(i int) T { return pattern[T](root, r*count+i) }); err != nil {
			return err
		}
	}
	if wants(only, "alltoall") {
		send := make([]T, n*count)
		for i := range send {
			send[i] = pattern[T](r, i)
		}
		recv := send
		if count%2 == 0 {
			recv = make([]T, n*count)
		}
		if err := AllToAll(ctx, c, send, recv); err != nil {
			return err
		}
		// block s of rank r's recv is block r of rank s's send
		if err := checkBits("alltoall", recv, func(i int) T { return pattern[T](i/blk, r*count+i%blk) }); err != nil {
			return err
		}
	}
	return nil
}
