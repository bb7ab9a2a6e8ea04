package comm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gorun-hpc/gorun/collectives"
)

// The v-collectives: MPI's allgatherv, gatherv, scatterv and alltoallv,
// with per-rank counts and displacements (in elements). A nil displs means
// packed: block r starts where block r−1 ends.
//
// Counts that a pair of ranks must agree on are checked before any data
// moves: allgatherv's counts travel in every message's signature, and
// gatherv, scatterv and alltoallv first exchange each pair's counts (one
// small scatter or all-to-all), so a disagreement fails with ErrMismatch
// naming both ranks rather than corrupting or hanging. That check costs
// one extra latency; the data then moves directly between each pair.

// AllGatherV gathers counts[r] elements from every rank r into
// recv[displs[r]:] on every rank (len(send) = counts[Rank]). counts must be
// the same on every rank, and the blocks of recv must not overlap (as in
// MPI; ErrInvalid); send may be recv's own block (in place) or overlap
// recv elsewhere. Counts that differ fail with ErrMismatch saying what the
// counts add up to on the two ranks that found it, and each rank's own:
// a peer's counts travel only as a signature.
func AllGatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int) error {
	if c == nil {
		return nilComm("allgatherv")
	}
	return allGatherV(ctx, c, c.ticket(), send, recv, counts, displs)
}

func allGatherV[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, counts, displs []int) error {
	const name = "allgatherv"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	displs, err := c.checkV(name, "", counts, displs, len(recv), true)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] {
		return c.invalid(name, "len(send) = %d, counts[%d] = %d", len(send), c.rank, counts[c.rank])
	}
	input := bytesOf(send)
	if mine := recv[displs[c.rank] : displs[c.rank]+len(send)]; !sameSlice(send, mine) {
		copy(mine, send)
		if overlap(input, bytesOf(recv)) {
			// Blocks arriving in recv may overwrite send before it
			// goes out: send the copy instead.
			input = bytesOf(mine)
		}
	}
	rank, size := c.rank, c.size
	s := spec{coll: collectives.AllGatherV, dt: DTypeOf[T](), count: countsSig(counts), work: bytesOf(recv), input: input,
		build: func(chunk int) *collectives.Schedule {
			return collectives.DirectAllGatherV(rank, size, counts, displs, chunk)
		}}
	err = rankErr(name, c.exec(ctx, &s))
	if re, ok := err.(*RankError); ok && errors.Is(err, ErrMismatch) {
		re.Err = countsMismatch(re.Err, c.rank, counts)
	}
	return err
}

// GatherV gathers every rank's send into root's recv, rank r's at
// recv[displs[r]:displs[r]+counts[r]]. counts, displs and recv matter at
// root only; there len(send) = counts[root], the blocks of recv must not
// overlap (ErrInvalid), and send may overlap recv.
func GatherV[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int) error {
	if c == nil {
		return nilComm("gatherv")
	}
	return gatherV(ctx, c, c.ticket(), send, recv, counts, displs, root)
}

func gatherV[T Number](ctx context.Context, c *Comm, t uint64, send, recv []T, counts, displs []int, root int) error {
	const name = "gatherv"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	var work []byte
	if c.rank == root {
		var err error
		if displs, err = c.checkV(name, "", counts, displs, len(recv), true); err != nil {
			return err
		}
		copy(recv[displs[root]:displs[root]+counts[root]], send)
		work = bytesOf(recv)
	}
	if err := c.agreeCounts(ctx, name, root, counts, len(send), true); err != nil {
		return err
	}
	rank, size, n := c.rank, c.size, len(send)
	s := spec{coll: collectives.GatherV, dt: DTypeOf[T](), root: root, work: work, input: bytesOf(send),
		build: func(chunk int) *collectives.Schedule {
			return collectives.DirectGatherV(rank, size, root, n, counts, displs, chunk)
		}}
	return rankErr(name, c.exec(ctx, &s))
}

// ScatterV sends send[displs[r]:displs[r]+counts[r]] from root to rank r's
// recv (len(recv) = counts[r]). send, counts and displs matter at root
// only; there recv may overlap send.
func ScatterV[T Number](ctx context.Context, c *Comm, send []T, counts, displs []int, recv []T, root int) error {
	if c == nil {
		return nilComm("scatterv")
	}
	return scatterV(ctx, c, c.ticket(), send, counts, displs, recv, root)
}

func scatterV[T Number](ctx context.Context, c *Comm, t uint64, send []T, counts, displs []int, recv []T, root int) error {
	const name = "scatterv"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	if root < 0 || root >= c.size {
		return c.invalid(name, "root %d out of range [0,%d)", root, c.size)
	}
	var input []byte
	if c.rank == root {
		var err error
		if displs, err = c.checkV(name, "", counts, displs, len(send), false); err != nil {
			return err
		}
		input = bytesOf(send)
	}
	if err := c.agreeCounts(ctx, name, root, counts, len(recv), false); err != nil {
		return err
	}
	rank, size, n := c.rank, c.size, len(recv)
	s := spec{coll: collectives.ScatterV, dt: DTypeOf[T](), root: root, work: bytesOf(recv), input: input,
		build: func(chunk int) *collectives.Schedule {
			return collectives.DirectScatterV(rank, size, root, n, counts, displs, chunk)
		}}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(name, err)
	}
	if c.rank == root {
		// After the sends: the root's recv may overlap their blocks (its
		// recv is not written by the schedule).
		copy(recv, send[displs[root]:displs[root]+counts[root]])
	}
	return nil
}

// AllToAllV sends send[sendDispls[b]:+sendCounts[b]] to rank b, where it
// lands at recv[recvDispls[Rank]:+recvCounts[Rank]]. Rank a's
// sendCounts[b] must equal rank b's recvCounts[a]. send and recv must not
// overlap, nor the blocks of recv (ErrInvalid); those of send may.
func AllToAllV[T Number](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	if c == nil {
		return nilComm("alltoallv")
	}
	return allToAllV(ctx, c, c.ticket(), send, sendCounts, sendDispls, recv, recvCounts, recvDispls)
}

func allToAllV[T Number](ctx context.Context, c *Comm, t uint64, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	const name = "alltoallv"
	if err := c.enter(ctx, t, name); err != nil {
		return err
	}
	defer c.release()
	sendDispls, err := c.checkV(name, "send", sendCounts, sendDispls, len(send), false)
	if err != nil {
		return err
	}
	if recvDispls, err = c.checkV(name, "recv", recvCounts, recvDispls, len(recv), true); err != nil {
		return err
	}
	if overlap(bytesOf(send), bytesOf(recv)) {
		return c.invalid(name, "send and recv overlap (they must not)")
	}
	if err := c.agreeAllToAll(ctx, name, sendCounts, recvCounts); err != nil {
		return err
	}
	r := c.rank
	if sendCounts[r] != recvCounts[r] {
		return c.invalid(name, "sendCounts[%d] = %d, recvCounts[%d] = %d (this rank's own block)", r, sendCounts[r], r, recvCounts[r])
	}
	copy(recv[recvDispls[r]:recvDispls[r]+recvCounts[r]], send[sendDispls[r]:])
	size := c.size
	s := spec{coll: collectives.AllToAllV, dt: DTypeOf[T](), work: bytesOf(recv), input: bytesOf(send),
		build: func(chunk int) *collectives.Schedule {
			return collectives.PairwiseAllToAllV(r, size, sendCounts, sendDispls, recvCounts, recvDispls, chunk)
		}}
	return rankErr(name, c.exec(ctx, &s))
}

// checkV validates counts and displacements against a buffer of n
// elements and returns the displacements (packed ones if displs is nil).
// Blocks that are written (writes) must not overlap, as in MPI, where
// such a call is erroneous: which rank's data would land there depends on
// arrival order.
func (c *Comm) checkV(op, which string, counts, displs []int, n int, writes bool) ([]int, error) {
	if which != "" {
		which += " "
	}
	if len(counts) != c.size {
		return nil, c.invalid(op, "%scounts has %d entries, want Size = %d", which, len(counts), c.size)
	}
	given := displs != nil // packed displacements cannot overlap
	if !given {
		displs = make([]int, c.size)
		off := 0
		for i, k := range counts {
			displs[i] = off
			off += max(k, 0)
		}
	} else if len(displs) != c.size {
		return nil, c.invalid(op, "%sdispls has %d entries, want Size = %d", which, len(displs), c.size)
	}
	for i, k := range counts {
		if k < 0 {
			return nil, c.invalid(op, "%scounts[%d] = %d is negative", which, i, k)
		}
		if d := displs[i]; d < 0 || d > n-k { // not d+k > n: that wraps for a huge d
			return nil, c.invalid(op, "%sblock %d (displacement %d, count %d) lies outside the buffer of %d elements", which, i, d, k, n)
		}
	}
	if writes && given {
		if a, b, ok := overlapping(counts, displs); ok {
			return nil, c.invalid(op, "%sblocks %d [%d,%d) and %d [%d,%d) overlap: each element may be written once", which,
				a, displs[a], displs[a]+counts[a], b, displs[b], displs[b]+counts[b])
		}
	}
	return displs, nil
}

// overlapping returns two non-empty blocks that share an element, if
// any: of the blocks sorted by displacement, two neighbours do if any do.
func overlapping(counts, displs []int) (a, b int, ok bool) {
	idx := make([]int, 0, len(counts))
	for i, k := range counts {
		if k > 0 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(x, y int) int { return cmp.Compare(displs[x], displs[y]) })
	for i := 1; i < len(idx); i++ {
		if a, b := idx[i-1], idx[i]; displs[b] < displs[a]+counts[a] {
			return a, b, true
		}
	}
	return 0, 0, false
}

// countsSig identifies a counts vector in allgatherv's message signature
// (its count field), which a peer compares with its own: the number of
// elements the counts add up to in the top bits, so that a disagreement
// can say it (countsMismatch), and a hash of the vector below. The peer's
// counts themselves never travel: checking them would cost a message
// before the data, as gatherv's check does.
func countsSig(counts []int) int {
	h := uint64(14695981039346656037)
	total := 0
	for _, k := range counts { // each k ≥ 0 and within recv (checkV)
		h = (h ^ uint64(k)) * 1099511628211
		total += k
	}
	return min(total, sigTotalMax)<<sigHashBits | int((h^h>>32)&(1<<sigHashBits-1))
}

// countsSig's fields: a hash of 29 bits, a total of 33 (a larger total
// counts as sigTotalMax), so that the signature is a non-negative int;
// where an int has 32 bits, a hash of 13 and a total of 17.
const (
	sigHashBits = strconv.IntSize/2 - 3
	sigTotalMax = 1<<(strconv.IntSize-2-sigHashBits) - 1
)

// sigMismatch is the engine's account of two signatures whose count
// differs (checkHeader's words, in internal/engine): the peer's, then the
// detecting rank's.
var sigMismatch = regexp.MustCompile(`rank (\d+) disagrees with rank (\d+): count (\d+), this rank (\d+)`)

// countsMismatch rewords err, a disagreement in allgatherv (on rank, which
// passed counts), in terms of counts: the engine's names the two
// signatures (countsSig), which say what the counts add up to.
func countsMismatch(err error, rank int, counts []int) error {
	msg := err.Error()
	if m := sigMismatch.FindStringSubmatchIndex(msg); m != nil {
		num := func(i int) int { n, _ := strconv.Atoi(msg[m[2*i]:m[2*i+1]]); return n }
		peer, det, theirs, ours := num(1), num(2), num(3)>>sigHashBits, num(4)>>sigHashBits
		diff := fmt.Sprintf("rank %d disagrees with rank %d: rank %d's counts add up to %s elements, rank %d's to %s",
			peer, det, peer, sigTotal(theirs), det, sigTotal(ours))
		if theirs == ours {
			diff = fmt.Sprintf("rank %d disagrees with rank %d: their counts differ, though both add up to %s elements",
				peer, det, sigTotal(ours))
		}
		msg = msg[:m[0]] + diff + msg[m[1]:]
	}
	return &reworded{msg: fmt.Sprintf("%s (allgatherv's counts must be the same on every rank; rank %d's are %s)", msg, rank, fmtCounts(counts)), err: err}
}

func sigTotal(n int) string {
	if n == sigTotalMax {
		return fmt.Sprintf("%d or more", n)
	}
	return strconv.Itoa(n)
}

// fmtCounts prints counts, or their first 16 and how many more.
func fmtCounts(counts []int) string {
	const most = 16
	if len(counts) <= most {
		return fmt.Sprint(counts)
	}
	return strings.TrimSuffix(fmt.Sprint(counts[:most]), "]") + fmt.Sprintf(" and %d more]", len(counts)-most)
}

// reworded is err with another text.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }

// mismatch fails the operation on every rank for a disagreement this rank
// found between its arguments and a peer's.
func (c *Comm) mismatch(op, format string, args ...any) error {
	err := fmt.Errorf("%w: %s", ErrMismatch, fmt.Sprintf(format, args...))
	c.eng.Withdraw(err)
	return &RankError{Rank: c.rank, Op: op, Err: err}
}

// agreeCounts checks that root's counts[r] equals rank r's own count n
// (root scatters its counts first). gather says which way data will flow,
// for the error message. The caller holds the turn.
func (c *Comm) agreeCounts(ctx context.Context, op string, root int, counts []int, n int, gather bool) error {
	// The scratch buffer is reused, so its registration is cached.
	buf := int64s(c.scratchFor(8 * (1 + c.size)))
	mine, all := buf[:1], buf[1:]
	if c.rank != root {
		all = nil
	} else {
		for i, k := range counts {
			all[i] = int64(k)
		}
		mine[0] = all[root]
	}
	s := spec{coll: collectives.Scatter, dt: DTypeOf[int64](), root: root, count: 1, work: bytesOf(mine), input: bytesOf(all)}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(op, err)
	}
	if want := int(mine[0]); want != n {
		if gather {
			return c.mismatch(op, "rank %d sends %d elements, root %d expects counts[%d] = %d", c.rank, n, root, c.rank, want)
		}
		return c.mismatch(op, "root %d sends counts[%d] = %d elements, rank %d expects %d", root, c.rank, want, c.rank, n)
	}
	return nil
}

// agreeAllToAll checks every pair's counts: rank a's sendCounts[b] against
// rank b's recvCounts[a] (one all-to-all of the counts). The caller holds
// the turn.
func (c *Comm) agreeAllToAll(ctx context.Context, op string, sendCounts, recvCounts []int) error {
	buf := int64s(c.scratchFor(16 * c.size))
	out, in := buf[:c.size], buf[c.size:]
	for i, k := range sendCounts {
		out[i] = int64(k)
	}
	in[c.rank] = out[c.rank]
	s := spec{coll: collectives.AllToAll, dt: DTypeOf[int64](), count: 1, work: bytesOf(in), input: bytesOf(out)}
	if err := c.exec(ctx, &s); err != nil {
		return rankErr(op, err)
	}
	for a, k := range in {
		if int(k) != recvCounts[a] {
			return c.mismatch(op, "rank %d sends %d elements to rank %d, which expects recvCounts[%d] = %d", a, k, c.rank, a, recvCounts[a])
		}
	}
	return nil
}

// int64s views b (8-byte aligned, as the scratch buffer is) as int64s.
func int64s(b []byte) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
