package comm

import (
	"fmt"
	"testing"
)

// The correctness matrix. Every collective × algorithm × element type × op
// runs against a serial reference (exact for integers, Min, Max and Prod;
// float sums within n·eps·Σ|x|), in place and out of place:
//
//   - TestCollectivesFull: world sizes 1, 2, 3, 4, 5, 7, 8; every algorithm,
//     all 12 element types, all 5 ops; counts 0, 1, n-1, n+1, 1000.
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

// exercise runs the collectives selected by only on cs with element type T.
func exercise[T Number](t *testing.T, cs []*Comm, counts []int, ops []Op, only string) {
	n := len(cs)
	ctx := testCtx(t)
	for ci, count := range counts {
		inPlace := ci%2 == 0
		root := (count + ci) % n
		for _, op := range ops {
			if wants(only, "allreduce") {
				got := make([][]T, n)
				mustAll(t, fmt.Sprintf("allreduce count=%d op=%s", count, op), onAll(cs, func(c *Comm) error {
					send := make([]T, count)
					for i := range send {
						send[i] = gen[T](c.Rank(), i, op)
					}
					recv := send
					if !inPlace {
						recv = make([]T, count)
					}
					got[c.Rank()] = recv
					return AllReduce(ctx, c, send, recv, op)
				}))
				for r := range n {
					if err := checkReduced(n, op, 0, got[r]); err != nil {
						t.Fatalf("allreduce count=%d op=%s in-place=%v rank %d: %v", count, op, inPlace, r, err)
					}
				}
			}
			if wants(only, "reducescatter") {
				got := make([][]T, n)
				mustAll(t, fmt.Sprintf("reducescatter count=%d op=%s", count, op), onAll(cs, func(c *Comm) error {
					send := make([]T, n*count)
					for i := range send {
						send[i] = gen[T](c.Rank(), i, op)
					}
					got[c.Rank()] = make([]T, count)
					return ReduceScatter(ctx, c, send, got[c.Rank()], op)
				}))
				for r := range n {
					if err := checkReduced(n, op, r*count, got[r]); err != nil {
						t.Fatalf("reducescatter count=%d op=%s rank %d: %v", count, op, r, err)
					}
				}
			}
			if wants(only, "reduce") {
				got := make([]T, count)
				mustAll(t, fmt.Sprintf("reduce count=%d op=%s", count, op), onAll(cs, func(c *Comm) error {
					send := make([]T, count)
					for i := range send {
						send[i] = gen[T](c.Rank(), i, op)
					}
					var recv []T
					if c.Rank() == root {
						recv = got
						if inPlace {
							copy(recv, send)
							send = recv
						}
					}
					return Reduce(ctx, c, send, recv, op, root)
				}))
				if err := checkReduced(n, op, 0, got); err != nil {
					t.Fatalf("reduce count=%d op=%s root=%d: %v", count, op, root, err)
				}
			}
		}
		moveData[T](t, cs, count, root, only)
	}
}

// moveData checks the data-movement collectives bit for bit.
func moveData[T Number](t *testing.T, cs []*Comm, count, root int, only string) {
	n := len(cs)
	ctx := testCtx(t)
	check := func(what string, r int, got []T, want func(i int) T) {
		t.Helper()
		for i, g := range got {
			if w := want(i); g != w {
				t.Fatalf("%s count=%d root=%d rank %d: element %d = %v, want %v", what, count, root, r, i, g, w)
			}
		}
	}
	if wants(only, "broadcast") {
		got := make([][]T, n)
		mustAll(t, "broadcast", onAll(cs, func(c *Comm) error {
			buf := make([]T, count)
			if c.Rank() == root {
				for i := range buf {
					buf[i] = pattern[T](root, i)
				}
			}
			got[c.Rank()] = buf
			return Broadcast(ctx, c, buf, root)
		}))
		for r := range n {
			check("broadcast", r, got[r], func(i int) T { return pattern[T](root, i) })
		}
	}
	if wants(only, "allgather") {
		got := make([][]T, n)
		mustAll(t, "allgather", onAll(cs, func(c *Comm) error {
			recv := make([]T, n*count)
			send := make([]T, count)
			if count%2 == 1 { // in place: send is recv's own block
				send = recv[c.Rank()*count : (c.Rank()+1)*count]
			}
			for i := range send {
				send[i] = pattern[T](c.Rank(), i)
			}
			got[c.Rank()] = recv
			return AllGather(ctx, c, send, recv)
		}))
		for r := range n {
			check("allgather", r, got[r], func(i int) T { return pattern[T](i/max(count, 1), i%max(count, 1)) })
		}
	}
	if wants(only, "gather") {
		got := make([]T, n*count)
		mustAll(t, "gather", onAll(cs, func(c *Comm) error {
			send := make([]T, count)
			for i := range send {
				send[i] = pattern[T](c.Rank(), i)
			}
			var recv []T
			if c.Rank() == root {
				recv = got
			}
			return Gather(ctx, c, send, recv, root)
		}))
		check("gather", root, got, func(i int) T { return pattern[T](i/max(count, 1), i%max(count, 1)) })
	}
	if wants(only, "scatter") {
		got := make([][]T, n)
		mustAll(t, "scatter", onAll(cs, func(c *Comm) error {
			var send []T
			if c.Rank() == root {
				send = make([]T, n*count)
				for i := range send {
					send[i] = pattern[T](root, i)
				}
			}
			got[c.Rank()] = make([]T, count)
			return Scatter(ctx, c, send, got[c.Rank()], root)
		}))
		for r := range n {
			check("scatter", r, got[r], func(i int) T { return pattern[T](root, r*count+i) })
		}
	}
	if wants(only, "alltoall") {
		got := make([][]T, n)
		mustAll(t, "alltoall", onAll(cs, func(c *Comm) error {
			send := make([]T, n*count)
			for i := range send {
				send[i] = pattern[T](c.Rank(), i)
			}
			recv := send
			if count%2 == 0 {
				recv = make([]T, n*count)
			}
			got[c.Rank()] = recv
			return AllToAll(ctx, c, send, recv)
		}))
		for r := range n {
			// block s of rank r's recv is block r of rank s's send
			check("alltoall", r, got[r], func(i int) T {
				s, j := i/max(count, 1), i%max(count, 1)
				return pattern[T](s, r*count+j)
			})
		}
	}
}
