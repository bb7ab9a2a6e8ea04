package collectives

import (
	"fmt"
	"slices"
)

// Kind is what one schedule op does.
type Kind uint8

const (
	// Send sends Len elements of buffer Buf at Off to Peer.
	Send Kind = iota
	// Recv receives Len elements from Peer and stores them at Work[Off:].
	Recv
	// RecvReduce receives Len elements from Peer and reduces them into
	// Work[Off:] (Work = Work op incoming).
	RecvReduce
)

func (k Kind) String() string {
	switch k {
	case Send:
		return "send"
	case Recv:
		return "recv"
	case RecvReduce:
		return "recv-reduce"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Buf names the buffer an op addresses.
type Buf uint8

const (
	// Work is the rank's working buffer: read by sends, written by receives.
	Work Buf = iota
	// Input is the caller's read-only input (only sends may use it).
	Input
)

// Op is one transfer of a schedule. Offsets and lengths count elements.
type Op struct {
	Kind Kind
	Buf  Buf
	Peer int
	Off  int
	Len  int
	// ToCopy (sends only) says the matching receive is a Recv, not a
	// RecvReduce, so the executor may write the payload straight into the
	// receiver's buffer (zero copy) once the receiver says where.
	ToCopy bool
	// FromInput (RecvReduce only) says the receive is the first write of
	// its range: Work[Off:] = Input[Off:] op incoming. ReadInput sets it.
	FromInput bool
	// Sig, when not 0, says the op's messages carry Call.Sigs[Sig-1] as
	// their signature instead of the call's own: a group of point-to-point
	// messages with different tags, lengths and sequence numbers runs as
	// one call (comm's p2p.go).
	Sig int32
	// Deps are indices of earlier ops of the same schedule that must have
	// completed before this op may start (a send: be posted; a receive: be
	// applied to Work). Finalize derives them from range overlaps; builders
	// may add explicit ones (After).
	Deps []int32
}

func (o Op) String() string {
	return fmt.Sprintf("%s peer=%d buf=%d [%d,+%d) copy=%v input=%v deps=%v", o.Kind, o.Peer, o.Buf, o.Off, o.Len, o.ToCopy, o.FromInput, o.Deps)
}

// Schedule is one rank's part of a collective: its ops in program order.
//
// Execution rules (the executor and the simulator both follow them):
//   - the sends to one peer are posted in program order, and the receives
//     from one peer are matched in program order with that peer's sends to
//     this rank (FIFO per ordered pair, like MPI non-overtaking);
//   - an op starts only once every op in its Deps has completed;
//   - otherwise ops run concurrently, so independent chunks pipeline.
type Schedule struct {
	Rank, Size int
	Ops        []Op
	// InputCopies, in a schedule rewritten by ReadInput, are the ranges
	// of Work that no receive writes: the caller copies them from Input.
	InputCopies []Span
	// ReadsInput says ReadInput rewrote the schedule.
	ReadsInput bool

	reducing bool // builders: sends appended now go to RecvReduce ops
}

// add appends an op and returns its index.
func (s *Schedule) add(k Kind, b Buf, peer, off, n int) int {
	s.Ops = append(s.Ops, Op{Kind: k, Buf: b, Peer: peer, Off: off, Len: n, ToCopy: k == Send && !s.reducing})
	return len(s.Ops) - 1
}

// addChunked appends ops for [off, off+n) split into pieces of at most
// chunk elements, returning the index range [first, end).
func (s *Schedule) addChunked(k Kind, b Buf, peer, off, n, chunk int) (int, int) {
	first := len(s.Ops)
	if n == 0 {
		return first, first
	}
	for p := 0; p < n; p += chunk {
		s.add(k, b, peer, off+p, min(chunk, n-p))
	}
	return first, len(s.Ops)
}

// After makes op i wait for op j (j < i) in addition to range hazards.
func (s *Schedule) After(i, j int) { s.Ops[i].Deps = append(s.Ops[i].Deps, int32(j)) }

// Finalize derives the hazard dependencies in program order: a send waits
// for earlier receives into an overlapping Work range (read after write); a
// receive waits for earlier sends (write after read) and receives (write
// after write, which also fixes the reduction order) that overlap it.
//
// The deps of an op are appended in increasing order, after any given by
// After. Checking every earlier op costs k²/2 for k ops, which a ring's
// 2(n-1) ops make minutes at thousands of ranks; so the Work range is cut
// at every op's ends into pieces, each piece lists the earlier ops over it
// (sends and receives apart), and an op looks at the lists of the pieces
// it covers, unless they hold more entries than there are earlier ops
// (many ops over many pieces), where it checks every earlier op instead.
func (s *Schedule) Finalize() *Schedule {
	k := len(s.Ops)
	if k <= finalizeDirect {
		for i := range s.Ops {
			s.depsDirect(i)
		}
		return s
	}
	var cuts []int
	for i := range s.Ops {
		if o := &s.Ops[i]; o.Len > 0 && o.Buf == Work {
			cuts = append(cuts, o.Off, o.Off+o.Len)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	// piece p is [cuts[p], cuts[p+1]); sends[p] and recvs[p] are the ops
	// seen so far that cover it, in program order.
	sends := make([][]int32, len(cuts))
	recvs := make([][]int32, len(cuts))
	seen := make([]int32, k) // seen[j] == i+1: j is a dep of i already
	var found []int32
	for i := range s.Ops {
		oi := &s.Ops[i]
		if oi.Len == 0 || oi.Buf != Work {
			continue
		}
		a, _ := slices.BinarySearch(cuts, oi.Off)
		b, _ := slices.BinarySearch(cuts, oi.Off+oi.Len)
		cost := 0
		for p := a; p < b; p++ {
			cost += len(recvs[p])
			if oi.Kind != Send {
				cost += len(sends[p])
			}
		}
		if cost > i {
			s.depsDirect(i)
		} else {
			found = found[:0]
			for p := a; p < b; p++ {
				found = mark(found, recvs[p], seen, int32(i+1))
				if oi.Kind != Send {
					found = mark(found, sends[p], seen, int32(i+1))
				}
			}
			slices.Sort(found)
			oi.Deps = append(oi.Deps, found...)
		}
		for p := a; p < b; p++ {
			if oi.Kind == Send {
				sends[p] = append(sends[p], int32(i))
			} else {
				recvs[p] = append(recvs[p], int32(i))
			}
		}
	}
	return s
}

// finalizeDirect is the size up to which Finalize checks every pair.
const finalizeDirect = 64

// mark appends to found the ops of list not yet marked with stamp.
func mark(found, list, seen []int32, stamp int32) []int32 {
	for _, j := range list {
		if seen[j] != stamp {
			seen[j] = stamp
			found = append(found, j)
		}
	}
	return found
}

// depsDirect appends op i's hazard deps by checking every earlier op.
func (s *Schedule) depsDirect(i int) {
	oi := &s.Ops[i]
	if oi.Len == 0 || oi.Buf != Work {
		return
	}
	for j := 0; j < i; j++ {
		oj := &s.Ops[j]
		if oj.Len == 0 || oj.Buf != Work || (oi.Kind == Send && oj.Kind == Send) {
			continue
		}
		if oj.Off < oi.Off+oi.Len && oi.Off < oj.Off+oj.Len {
			oi.Deps = append(oi.Deps, int32(j))
		}
	}
}

// Validate checks the schedule's own invariants: peers in range and not
// self, ranges inside [0, workLen) or [0, inputLen), deps pointing backwards.
func (s *Schedule) Validate(workLen, inputLen int) error {
	for i, o := range s.Ops {
		if o.Peer < 0 || o.Peer >= s.Size || o.Peer == s.Rank {
			return fmt.Errorf("op %d (%v): bad peer", i, o)
		}
		lim := workLen
		if o.Buf == Input {
			lim = inputLen
			if o.Kind != Send {
				return fmt.Errorf("op %d (%v): receive into Input", i, o)
			}
		}
		if o.FromInput && o.Kind != RecvReduce {
			return fmt.Errorf("op %d (%v): FromInput on a %s", i, o, o.Kind)
		}
		if o.Off < 0 || o.Len < 0 || o.Off+o.Len > lim || o.FromInput && o.Off+o.Len > inputLen {
			return fmt.Errorf("op %d (%v): range outside [0,%d)", i, o, lim)
		}
		for _, d := range o.Deps {
			if int(d) >= i || d < 0 {
				return fmt.Errorf("op %d (%v): dep %d not earlier", i, o, d)
			}
		}
	}
	return nil
}

// segment returns [start, end) of segment i when n elements are split into
// parts balanced parts.
func segment(n, parts, i int) (int, int) {
	return i * n / parts, (i + 1) * n / parts
}

func mod(a, n int) int { return ((a % n) + n) % n }
