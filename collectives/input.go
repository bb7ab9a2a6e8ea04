package collectives

import "slices"

// Span is a range of elements of a buffer.
type Span struct{ Off, Len int }

// ReadInput rewrites s, a schedule that expects Work to start as a copy of
// Input, so that Work may start undefined and nobody copies Input into it
// first: the copy of an out-of-place call (MPI reads its first step from
// the send buffer too). In program order, which the hazard deps make the
// order of effects on each range:
//   - a send from a range of Work that no earlier receive wrote sends from
//     Input instead;
//   - a RecvReduce into such a range becomes its first write,
//     Work = Input op incoming (FromInput): the same operands in the same
//     order, so the result is bitwise the one in place;
//   - what no receive writes at all is left in InputCopies.
//
// n is Work's length in elements. It returns false, leaving s unchanged,
// when an op reads a range that earlier receives wrote only in part
// (splitting it would change its messages); the caller then copies Input
// into Work first and runs s as it was.
func (s *Schedule) ReadInput(n int) bool {
	var w written
	bufs := make([]Buf, len(s.Ops))
	first := make([]bool, len(s.Ops))
	for i, o := range s.Ops {
		bufs[i] = o.Buf
		if o.Len == 0 || o.Buf != Work {
			continue
		}
		if o.Kind == Recv {
			w.add(o.Off, o.Off+o.Len)
			continue
		}
		switch w.covers(o.Off, o.Off+o.Len) {
		case coverNone:
			if o.Kind == Send {
				bufs[i] = Input
			} else {
				first[i] = true
			}
		case coverPart:
			return false
		}
		if o.Kind == RecvReduce {
			w.add(o.Off, o.Off+o.Len)
		}
	}
	for i := range s.Ops {
		s.Ops[i].Buf = bufs[i]
		s.Ops[i].FromInput = first[i]
	}
	s.InputCopies = w.gaps(n)
	s.ReadsInput = true
	return true
}

const (
	coverNone = iota
	coverPart
	coverAll
)

// written is a set of element ranges: sorted, disjoint, not adjacent.
type written struct{ lo, hi []int }

// covers says whether [a, b) is outside the set, inside it, or neither.
func (w *written) covers(a, b int) int {
	// k is the first range that ends after a.
	k, _ := slices.BinarySearch(w.hi, a+1)
	switch {
	case k == len(w.lo) || w.lo[k] >= b:
		return coverNone
	case w.lo[k] <= a && w.hi[k] >= b:
		return coverAll
	}
	return coverPart
}

// add puts [a, b) into the set, merging what it touches.
func (w *written) add(a, b int) {
	k, _ := slices.BinarySearch(w.hi, a) // first range ending at or after a
	m := k
	for m < len(w.lo) && w.lo[m] <= b {
		a, b = min(a, w.lo[m]), max(b, w.hi[m])
		m++
	}
	w.lo = slices.Replace(w.lo, k, m, a)
	w.hi = slices.Replace(w.hi, k, m, b)
}

// gaps returns what of [0, n) is outside the set.
func (w *written) gaps(n int) []Span {
	var g []Span
	at := 0
	for k := range w.lo {
		if w.lo[k] > at {
			g = append(g, Span{Off: at, Len: w.lo[k] - at})
		}
		at = w.hi[k]
	}
	if at < n {
		g = append(g, Span{Off: at, Len: n - at})
	}
	return g
}
