package comm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The v-collectives, scans, integer ops, value-index pairs and the
// non-blocking forms, over the same matrix as TestCollectivesFull (world
// sizes 1…8, all 12 element types, counts 0, 1, n−1, n+1, 1000) and the
// 16-rank sample, against serial references.

var intOps = []Op{BAnd, BOr, BXor, LAnd, LOr}

// vcount is rank a's count towards rank b in round ci: uneven, with zeros.
func vcount(a, b, ci, count int) int { return (a*2 + b*3 + ci) % (count + 2) }

// packedGaps lays out counts with a one-element gap after each block.
func packedGaps(counts []int) (displs []int, total int) {
	displs = make([]int, len(counts))
	for i, k := range counts {
		displs[i] = total
		total += k + 1
	}
	return displs, total
}

func TestVectorFull(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8} {
		cs := newLocal(t, n)
		for _, ty := range allVTypes {
			t.Run(fmt.Sprintf("n=%d/%s", n, ty.name), func(t *testing.T) { ty.run(t, cs, countsFor(n)) })
		}
	}
}

func TestVectorSampled(t *testing.T) {
	cs := newLocal(t, 16)
	for _, ty := range []vtypeCase{vtc[float32]("float32"), vtc[int64]("int64"), vtc[BFloat16]("bfloat16")} {
		t.Run("n=16/"+ty.name, func(t *testing.T) { ty.run(t, cs, countsFor(16)) })
	}
}

type vtypeCase struct {
	name string
	run  func(t *testing.T, cs []*Comm, counts []int)
}

func vtc[T Number](name string) vtypeCase {
	return vtypeCase{name, func(t *testing.T, cs []*Comm, counts []int) {
		ctx := testCtx(t)
		for ci, count := range counts {
			errs := onAll(cs, func(c *Comm) error { return vectorRound[T](ctx, c, ci, count) })
			mustAll(t, fmt.Sprintf("count=%d", count), errs)
		}
	}}
}

var allVTypes = []vtypeCase{
	vtc[int8]("int8"), vtc[int16]("int16"), vtc[int32]("int32"), vtc[int64]("int64"),
	vtc[uint8]("uint8"), vtc[uint16]("uint16"), vtc[uint32]("uint32"), vtc[uint64]("uint64"),
	vtc[float32]("float32"), vtc[float64]("float64"), vtc[Float16]("float16"), vtc[BFloat16]("bfloat16"),
	vtc[int]("int"), vtc[uint]("uint"),
}

// vectorRound is one rank's part of a round; odd rounds use the
// non-blocking forms, all started before the first is waited for.
func vectorRound[T Number](ctx context.Context, c *Comm, ci, count int) error {
	nb := ci%2 == 1
	if err := vRound[T](ctx, c, ci, count, nb); err != nil {
		return err
	}
	ops := allOps
	if !isFloat[T]() {
		ops = append(append([]Op{}, allOps...), intOps...)
	}
	if err := scanRound[T](ctx, c, count, ops, nb); err != nil {
		return err
	}
	if !isFloat[T]() {
		if err := rankRound[T](ctx, c, ci, count, intOps, "allreduce"); err != nil {
			return err
		}
		if err := rankRound[T](ctx, c, ci, count, intOps, "reduce"); err != nil {
			return err
		}
		if err := rankRound[T](ctx, c, ci, count, intOps, "reducescatter"); err != nil {
			return err
		}
	}
	return locRound[T](ctx, c, ci, count, nb)
}

// run calls f blocking, or starts it with g and waits later.
type runner struct {
	ctx  context.Context
	nb   bool
	reqs []*Request
}

func (r *runner) do(f func() error, g func() *Request) error {
	if !r.nb {
		return f()
	}
	r.reqs = append(r.reqs, g())
	return nil
}

func (r *runner) wait() error { return WaitAll(r.ctx, r.reqs...) }

func vRound[T Number](ctx context.Context, c *Comm, ci, count int, nb bool) error {
	n, r := c.Size(), c.Rank()
	root := (count + ci) % n
	run := &runner{ctx: ctx, nb: nb}
	filler := func(i int) T { return pattern[T](n+5, i) }
	fill := func(b []T) []T {
		for i := range b {
			b[i] = filler(i)
		}
		return b
	}

	// allgatherv and gatherv: rank s contributes vcount(s, 0) elements.
	counts := make([]int, n)
	for s := range n {
		counts[s] = vcount(s, 0, ci, count)
	}
	displs, total := packedGaps(counts)
	agRecv := fill(make([]T, total))
	agSend := make([]T, counts[r])
	if ci%4 < 2 { // in place
		agSend = agRecv[displs[r] : displs[r]+counts[r]]
	}
	for i := range agSend {
		agSend[i] = pattern[T](r, i)
	}
	gRecv := fill(make([]T, total))
	gSend := make([]T, counts[r])
	for i := range gSend {
		gSend[i] = pattern[T](r, i)
	}
	// scatterv: root's send holds pattern(root, ·), block s for rank s.
	var sSend []T
	if r == root {
		sSend = make([]T, total)
		for i := range sSend {
			sSend[i] = pattern[T](root, i)
		}
	}
	sRecv := make([]T, counts[r])
	// alltoallv: rank a sends vcount(a, b) elements to b.
	sc, rc := make([]int, n), make([]int, n)
	for b := range n {
		sc[b], rc[b] = vcount(r, b, ci, count), vcount(b, r, ci, count)
	}
	sd, stot := packedGaps(sc)
	rd, rtot := packedGaps(rc)
	aSend, aRecv := make([]T, stot), fill(make([]T, rtot))
	for i := range aSend {
		aSend[i] = pattern[T](r, i)
	}
	if ci%4 == 3 {
		sd, rd = nil, nil // packed
		aSend, aRecv = aSend[:stot-n], fill(make([]T, rtot-n))
	}

	steps := []struct {
		f func() error
		g func() *Request
	}{
		{func() error { return AllGatherV(ctx, c, agSend, agRecv, counts, displs) },
			func() *Request { return IAllGatherV(ctx, c, agSend, agRecv, counts, displs) }},
		{func() error { return GatherV(ctx, c, gSend, gRecv, counts, displs, root) },
			func() *Request { return IGatherV(ctx, c, gSend, gRecv, counts, displs, root) }},
		{func() error { return ScatterV(ctx, c, sSend, counts, displs, sRecv, root) },
			func() *Request { return IScatterV(ctx, c, sSend, counts, displs, sRecv, root) }},
		{func() error { return AllToAllV(ctx, c, aSend, sc, sd, aRecv, rc, rd) },
			func() *Request { return IAllToAllV(ctx, c, aSend, sc, sd, aRecv, rc, rd) }},
	}
	for _, s := range steps {
		if err := run.do(s.f, s.g); err != nil {
			return err
		}
	}
	if err := run.wait(); err != nil {
		return err
	}

	// Block s of a gathered buffer is pattern(s, ·); gaps keep the filler.
	checkGathered := func(what string, got []T) error {
		want := make([]T, len(got))
		for i := range want {
			want[i] = filler(i)
		}
		for s := range n {
			for j := range counts[s] {
				want[displs[s]+j] = pattern[T](s, j)
			}
		}
		return checkBits(what, got, func(i int) T { return want[i] })
	}
	if err := checkGathered("allgatherv", agRecv); err != nil {
		return err
	}
	if r == root {
		if err := checkGathered("gatherv", gRecv); err != nil {
			return err
		}
	}
	if err := checkBits("scatterv", sRecv, func(i int) T { return pattern[T](root, displs[r]+i) }); err != nil {
		return err
	}
	// Block a of rank r's recv is what a sent from its send offset for r.
	want := make([]T, len(aRecv))
	for i := range want {
		want[i] = filler(i)
	}
	off := 0
	for a := range n {
		aoff := 0 // a's send offset for r
		for b := range r {
			aoff += vcount(a, b, ci, count)
			if sd != nil {
				aoff++
			}
		}
		for j := range rc[a] {
			want[off+j] = pattern[T](a, aoff+j)
		}
		off += rc[a]
		if rd != nil {
			off++
		}
	}
	return checkBits("alltoallv", aRecv, func(i int) T { return want[i] })
}

// scanRound checks Scan and ExScan for every op against the serial
// reduction over ranks 0 … r (0 … r−1).
func scanRound[T Number](ctx context.Context, c *Comm, count int, ops []Op, nb bool) error {
	r := c.Rank()
	run := &runner{ctx: ctx, nb: nb}
	type result struct {
		op         Op
		scan, excl []T
	}
	var res []result
	for _, op := range ops {
		send := make([]T, count)
		for i := range send {
			send[i] = gen[T](r, i, op)
		}
		scan, excl := make([]T, count), append([]T(nil), send...) // exscan in place
		if err := run.do(func() error { return Scan(ctx, c, send, scan, op) },
			func() *Request { return IScan(ctx, c, send, scan, op) }); err != nil {
			return err
		}
		if err := run.do(func() error { return ExScan(ctx, c, excl, excl, op) },
			func() *Request { return IExScan(ctx, c, excl, excl, op) }); err != nil {
			return err
		}
		res = append(res, result{op, scan, excl})
	}
	if err := run.wait(); err != nil {
		return err
	}
	for _, x := range res {
		if err := checkReduced(r+1, x.op, 0, x.scan); err != nil {
			return fmt.Errorf("scan op=%s: %w", x.op, err)
		}
		if r == 0 {
			if err := checkBits("exscan rank 0", x.excl, func(i int) T { return gen[T](0, i, x.op) }); err != nil {
				return fmt.Errorf("op=%s: %w", x.op, err)
			}
		} else if err := checkReduced(r, x.op, 0, x.excl); err != nil {
			return fmt.Errorf("exscan op=%s: %w", x.op, err)
		}
	}
	return nil
}

// locRound checks AllReduceLoc and ReduceLoc: value gen(rank, i), index
// rank·1000+i, against the serial MinLoc/MaxLoc.
func locRound[T Number](ctx context.Context, c *Comm, ci, count int, nb bool) error {
	n, r := c.Size(), c.Rank()
	root := (count + ci) % n
	run := &runner{ctx: ctx, nb: nb}
	in := func(s, i int) ValueIndex[T] { return ValueIndex[T]{Value: gen[T](s, i, Max), Index: int64(s*1000 + i)} }
	var outs [][]ValueIndex[T]
	for _, op := range []Op{MinLoc, MaxLoc} {
		send := make([]ValueIndex[T], count)
		for i := range send {
			send[i] = in(r, i)
		}
		all, at := make([]ValueIndex[T], count), make([]ValueIndex[T], count)
		if err := run.do(func() error { return AllReduceLoc(ctx, c, send, all, op) },
			func() *Request { return IAllReduceLoc(ctx, c, send, all, op) }); err != nil {
			return err
		}
		if err := run.do(func() error { return ReduceLoc(ctx, c, send, at, op, root) },
			func() *Request { return IReduceLoc(ctx, c, send, at, op, root) }); err != nil {
			return err
		}
		outs = append(outs, all, at)
	}
	if err := run.wait(); err != nil {
		return err
	}
	for k, op := range []Op{MinLoc, MaxLoc} {
		for i := range count {
			best := in(0, i)
			for s := 1; s < n; s++ {
				x := in(s, i)
				a, b := ToFloat64(x.Value), ToFloat64(best.Value)
				if (op == MinLoc && a < b) || (op == MaxLoc && a > b) {
					best = x
				}
			}
			if got := outs[2*k][i]; got != best {
				return fmt.Errorf("allreduce %s element %d = %v, want %v", op, i, got, best)
			}
			if got := outs[2*k+1][i]; r == root && got != best {
				return fmt.Errorf("reduce %s element %d = %v, want %v", op, i, got, best)
			}
		}
	}
	return nil
}

// TestVectorErrors: bad arguments and disagreements fail on every rank.
func TestVectorErrors(t *testing.T) {
	ctx := testCtx(t)
	type tcase struct {
		name string
		f    func(c *Comm) error
		want error
	}
	cases := []tcase{
		{"float band", func(c *Comm) error {
			b := []float32{1}
			return AllReduce(ctx, c, b, b, BAnd)
		}, ErrInvalid},
		{"minloc on plain values", func(c *Comm) error {
			b := []int32{1}
			return Scan(ctx, c, b, b, MinLoc)
		}, ErrInvalid},
		{"negative count", func(c *Comm) error {
			return AllGatherV(ctx, c, []int32{}, make([]int32, 4), []int{0, 0, -1, 0}, nil)
		}, ErrInvalid},
		{"alltoallv counts disagree", func(c *Comm) error {
			counts := []int{1, 1, 1, 1}
			rc := []int{1, 1, 1, 1}
			if c.Rank() == 1 {
				rc[0] = 2 // expects 2 from rank 0, which sends 1
			}
			return AllToAllV(ctx, c, make([]int32, 4), counts, nil, make([]int32, 5), rc, nil)
		}, ErrMismatch},
		{"allgatherv counts disagree", func(c *Comm) error {
			counts := []int{1, 1, 1, 1}
			if c.Rank() == 3 {
				counts = []int{1, 1, 2, 1}
			}
			recv := make([]int32, 5)
			return AllGatherV(ctx, c, make([]int32, counts[c.Rank()]), recv, counts, nil)
		}, ErrMismatch},
		{"gatherv count disagrees with root", func(c *Comm) error {
			send := make([]int32, 2)
			if c.Rank() == 2 {
				send = send[:1]
			}
			return GatherV(ctx, c, send, make([]int32, 8), []int{2, 2, 2, 2}, nil, 0)
		}, ErrMismatch},
		{"scatterv count disagrees with root", func(c *Comm) error {
			recv := make([]int32, 1)
			if c.Rank() == 3 {
				recv = make([]int32, 3)
			}
			return ScatterV(ctx, c, make([]int32, 4), []int{1, 1, 1, 1}, nil, recv, 1)
		}, ErrMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 4)
			errs := onAll(cs, func(c *Comm) error {
				err := tc.f(c)
				if err == nil {
					// A rank whose part completed fails at its next operation.
					err = c.Barrier(ctx)
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, tc.want) {
					t.Errorf("rank %d: %v, want %v", r, err, tc.want)
				}
			}
			t.Logf("rank 0: %v", errs[0])
		})
	}
}

// TestAllGatherVCountsMessage: ranks whose allgatherv counts differ fail
// with ErrMismatch in terms of counts (what they add up to on the two
// ranks the engine compared, and each rank's own), where the message gave
// two 62-bit hashes of them.
func TestAllGatherVCountsMessage(t *testing.T) {
	ctx := testCtx(t)
	hash := regexp.MustCompile(`\d{10,}`)
	for _, tc := range []struct {
		name   string
		counts [2][]int
		want   string // in the detecting rank's message
	}{
		{"totals differ", [2][]int{{1, 1}, {1, 2}}, "counts add up to "},
		{"same total", [2][]int{{2, 1}, {1, 2}}, "their counts differ, though both add up to 3 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 2)
			errs := onAll(cs, func(c *Comm) error {
				counts := tc.counts[c.Rank()]
				err := AllGatherV(ctx, c, make([]int32, counts[c.Rank()]), make([]int32, 3), counts, nil)
				if err == nil {
					err = c.Barrier(ctx)
				}
				return err
			})
			said := false
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				if !errors.Is(err, ErrMismatch) {
					t.Fatalf("rank %d: %v, want ErrMismatch", r, err)
				}
				msg := err.Error()
				if h := hash.FindString(msg); h != "" {
					t.Errorf("rank %d: the message gives %s, a hash", r, h)
				}
				if own := fmt.Sprintf("rank %d's are %v", r, tc.counts[r]); !strings.Contains(msg, own) {
					t.Errorf("rank %d: the message does not say %q", r, own)
				}
				said = said || strings.Contains(msg, tc.want)
			}
			if !said {
				t.Errorf("no rank's message says %q", tc.want)
			}
		})
	}
}

// TestNonBlockingAll starts one of every non-blocking collective and a
// ring of ISend/IRecv before waiting for any, and checks each result
// against its blocking form's reference.
func TestNonBlockingAll(t *testing.T) {
	const n = 4
	cs := newLocal(t, n)
	ctx := testCtx(t)
	errs := onAll(cs, func(c *Comm) error {
		r := c.Rank()
		x := []int32{int32(r + 1), int32(10 * (r + 1))}
		red, all, bc := make([]int32, 2), make([]int32, 2), []int32{int32(r), 0}
		gat, sca, a2a := make([]int32, 2*n), make([]int32, 2), make([]int32, n)
		scaIn := []int32{0, 1, 2, 3, 4, 5, 6, 7}
		ag, rs := make([]int32, 2*n), make([]int32, 1)
		a2aIn := []int32{int32(r * 10), int32(r*10 + 1), int32(r*10 + 2), int32(r*10 + 3)}
		rsIn := []int32{1, 2, 3, 4}
		got := make([]int32, 1<<18)
		out := make([]int32, 1<<18) // 1 MiB: sent directly, crossed (p2p.go)
		for i := range out {
			out[i] = int32(r*1_000_000 + i)
		}
		reqs := []*Request{
			IAllReduce(ctx, c, x, all, Sum),
			IReduce(ctx, c, x, red, Max, 1),
			IBroadcast(ctx, c, bc, 2),
			IGather(ctx, c, x, gat, 3),
			IScatter(ctx, c, scaIn, sca, 0),
			IAllGather(ctx, c, x, ag),
			IReduceScatter(ctx, c, rsIn, rs, Sum),
			IAllToAll(ctx, c, a2aIn, a2a),
			c.IBarrier(ctx),
			// Everyone sends to the next rank first, then receives from
			// the previous one.
			ISend(ctx, c, out, (r+1)%n, 7),
			IRecv(ctx, c, got[:len(out)], (r+n-1)%n, 7),
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			return err
		}
		prev := (r + n - 1) % n
		checks := []struct {
			what      string
			got, want []int32
		}{
			{"iallreduce", all, []int32{10, 100}},
			{"ibroadcast", bc, []int32{2, 0}},
			{"iscatter", sca, scaIn[2*r : 2*r+2]},
			{"iallgather", ag, []int32{1, 10, 2, 20, 3, 30, 4, 40}},
			{"ireducescatter", rs, []int32{int32(4 * (r + 1))}},
			{"ialltoall", a2a, []int32{int32(r), int32(10 + r), int32(20 + r), int32(30 + r)}},
			{"irecv", got[:3], []int32{int32(prev * 1_000_000), int32(prev*1_000_000 + 1), int32(prev*1_000_000 + 2)}},
		}
		if r == 1 {
			checks = append(checks, struct {
				what      string
				got, want []int32
			}{"ireduce", red, []int32{4, 40}})
		}
		if r == 3 {
			checks = append(checks, struct {
				what      string
				got, want []int32
			}{"igather", gat, []int32{1, 10, 2, 20, 3, 30, 4, 40}})
		}
		for _, ch := range checks {
			if fmt.Sprint(ch.got) != fmt.Sprint(ch.want) {
				return fmt.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
			}
		}
		return nil
	})
	mustAll(t, "non-blocking", errs)
}

// TestISendIRecvLargeOrdered: the exchange ISend documents for messages of
// 64 KiB and more (here 1 MiB), started before either is waited for, with
// the lower rank of each pair sending first.
func TestISendIRecvLargeOrdered(t *testing.T) {
	cs := newLocal(t, 4)
	ctx := testCtx(t)
	errs := onAll(cs, func(c *Comm) error {
		r := c.Rank()
		peer := r ^ 1
		out, in := make([]float32, 1<<18), make([]float32, 1<<18)
		for i := range out {
			out[i] = float32(r*1000 + i%1000)
		}
		var reqs []*Request
		if r < peer {
			reqs = append(reqs, ISend(ctx, c, out, peer, 1), IRecv(ctx, c, in, peer, 1))
		} else {
			reqs = append(reqs, IRecv(ctx, c, in, peer, 1), ISend(ctx, c, out, peer, 1))
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			return err
		}
		return checkBits("irecv", in, func(i int) float32 { return float32(peer*1000 + i%1000) })
	})
	mustAll(t, "large ordered exchange", errs)
}
