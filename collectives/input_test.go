package collectives

import (
	"slices"
	"testing"
)

func TestWrittenSet(t *testing.T) {
	var w written
	w.add(10, 20)
	w.add(30, 40)
	w.add(20, 25) // touches [10,20): merges
	for _, c := range []struct{ a, b, want int }{
		{0, 10, coverNone}, {10, 25, coverAll}, {12, 14, coverAll}, {24, 26, coverPart},
		{25, 30, coverNone}, {5, 11, coverPart}, {30, 40, coverAll}, {40, 50, coverNone}, {0, 50, coverPart},
	} {
		if got := w.covers(c.a, c.b); got != c.want {
			t.Errorf("covers(%d, %d) = %d, want %d (set %v %v)", c.a, c.b, got, c.want, w.lo, w.hi)
		}
	}
	w.add(0, 31) // swallows [10,25) and joins [30,40)
	if !slices.Equal(w.lo, []int{0}) || !slices.Equal(w.hi, []int{40}) {
		t.Fatalf("set after add(0, 31) = %v %v, want [0] [40]", w.lo, w.hi)
	}
	if g := w.gaps(50); !slices.Equal(g, []Span{{40, 10}}) {
		t.Fatalf("gaps(50) = %v", g)
	}
}

// A send of a range that an earlier receive wrote only in part cannot read
// either buffer whole: ReadInput declines and leaves the schedule as it was.
func TestReadInputDeclinesPartlyWritten(t *testing.T) {
	s := &Schedule{Rank: 0, Size: 2}
	s.add(Recv, Work, 1, 0, 4)
	s.add(Send, Work, 1, 2, 4)
	s.Finalize()
	before := slices.Clone(s.Ops)
	if s.ReadInput(8) {
		t.Fatal("ReadInput accepted a send of a range written in part")
	}
	if s.ReadsInput || s.InputCopies != nil || !slices.EqualFunc(s.Ops, before, func(a, b Op) bool { return a.Buf == b.Buf && a.FromInput == b.FromInput }) {
		t.Fatalf("ReadInput changed a schedule it declined: %v", s.Ops)
	}

	// Sends before any receive read Input; the first reduce of a range
	// starts from Input; what nothing writes is left to copy.
	s = &Schedule{Rank: 0, Size: 2}
	s.add(Send, Work, 1, 0, 4)
	s.add(RecvReduce, Work, 1, 0, 4)
	s.add(RecvReduce, Work, 1, 0, 4)
	s.add(Send, Work, 1, 0, 4)
	s.Finalize()
	if !s.ReadInput(6) {
		t.Fatal("ReadInput declined")
	}
	if s.Ops[0].Buf != Input || !s.Ops[1].FromInput || s.Ops[2].FromInput || s.Ops[3].Buf != Work {
		t.Fatalf("rewritten ops: %v", s.Ops)
	}
	if !slices.Equal(s.InputCopies, []Span{{4, 2}}) {
		t.Fatalf("InputCopies = %v, want [{4 2}]", s.InputCopies)
	}
}
