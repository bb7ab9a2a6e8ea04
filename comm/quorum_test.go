package comm

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// world is a world of the named members, rank i the i-th name.
func world(epoch uint32, names ...string) bootstrap.World {
	w := bootstrap.World{Epoch: epoch, Size: len(names)}
	for i, n := range names {
		w.Members = append(w.Members, bootstrap.Member{Rank: i, Name: n})
	}
	return w
}

// The majority rule, and half with the base's first rank: of any cut, one
// side at most goes on.
func TestQuorum(t *testing.T) {
	four := world(1, "a", "b", "c", "d")
	for _, tc := range []struct {
		base bootstrap.World
		w    []string
		kept int
		ok   bool
	}{
		{four, []string{"a", "b", "c"}, 3, true},
		{four, []string{"b", "c", "d"}, 3, true}, // rank 0 lost: a majority all the same
		{four, []string{"d"}, 1, false},
		{four, []string{"a", "b"}, 2, true}, // half, with rank 0
		{four, []string{"c", "d"}, 2, false},
		{four, []string{"a", "d"}, 2, true},
		{four, []string{"a", "b", "c", "d", "e"}, 4, true},     // a Grow
		{four, []string{"c", "d", "c2", "d2"}, 2, false},       // a side grown by restarts: they do not count
		{four, []string{"a", "b", "c2", "d2", "e"}, 2, true},   // half and rank 0
		{world(3, "b", "c"), []string{"b"}, 1, true},           // a 2-rank world loses its rank 1
		{world(3, "b", "c"), []string{"c"}, 1, false},          // or its rank 0
		{world(2, "a", "b", "c"), []string{"b", "c"}, 2, true}, // after a Shrink to 3, a cut of 2|1
		{world(2, "a", "b", "c"), []string{"a"}, 1, false},
		{world(1, "a"), []string{"a"}, 1, true},
		// A Grow of a and b by three newcomers failed, one of them dead:
		// the others' Init failed and they left, and a and b shrink. The
		// base is still a and b (the Grow's check never passed), not the
		// 5 of the grown world, of which they would keep 2.
		{world(2, "a", "b"), []string{"a", "b"}, 2, true},
		// The job down to b and c grew by a and d restarted; a died during
		// the Grow: b and c are the base, not 2 of a world of 4 without
		// its rank 0.
		{world(4, "b", "c"), []string{"b", "c"}, 2, true},
	} {
		b := baseOf(tc.base)
		w := world(tc.base.Epoch+1, tc.w...)
		kept, ok := b.quorum(w)
		if kept != tc.kept || ok != tc.ok {
			t.Errorf("base %v, world %v: quorum %d, %v; want %d, %v", names(tc.base), tc.w, kept, ok, tc.kept, tc.ok)
		}
		if ok {
			continue
		}
		err := b.noQuorum(w, kept)
		if !errors.Is(err, ErrNoQuorum) || !strings.Contains(err.Error(), "GORUN_QUORUM") {
			t.Errorf("noQuorum: %v", err)
		}
	}
	// A joiner whose membership check failed has an empty base: no world
	// gives it a quorum.
	if _, ok := (quorumBase{}).quorum(world(5, "a", "b", "c")); ok {
		t.Error("an empty base has a quorum")
	}
	// Of every cut of a world in two, exactly one side has a quorum.
	for n := 1; n <= 7; n++ {
		var all []string
		for i := range n {
			all = append(all, string(rune('a'+i)))
		}
		b := baseOf(world(1, all...))
		for mask := range 1 << n {
			var x, y []string
			for i, m := range all {
				if mask&(1<<i) != 0 {
					x = append(x, m)
				} else {
					y = append(y, m)
				}
			}
			_, okx := b.quorum(world(2, x...))
			_, oky := b.quorum(world(2, y...))
			if okx && oky {
				t.Errorf("both %v and %v of %v have a quorum", x, y, all)
			}
			if !okx && !oky {
				t.Errorf("neither %v nor %v of %v has a quorum", x, y, all)
			}
		}
	}
}

func names(w bootstrap.World) []string {
	var out []string
	for _, m := range w.Members {
		out = append(out, m.Name)
	}
	return out
}

func TestQuorumTunable(t *testing.T) {
	for in, want := range map[string]bool{"": false, "off": false, "majority": true, " Majority ": true} {
		tn, err := readTunables(func(k string) string {
			if k == "GORUN_QUORUM" {
				return in
			}
			return ""
		})
		if err != nil || tn.Quorum != want {
			t.Errorf("GORUN_QUORUM=%q: %v, %v; want %v", in, tn.Quorum, err, want)
		}
	}
	if err := CheckEnv(func(k string) string {
		if k == "GORUN_QUORUM" {
			return "1"
		}
		return ""
	}, 4); err == nil || !strings.Contains(err.Error(), "GORUN_QUORUM") {
		t.Errorf("GORUN_QUORUM=1: %v, want an error naming it", err)
	}
	c, err := newConfig(WithQuorum())
	if err != nil || !c.quorum {
		t.Errorf("WithQuorum: quorum %v, %v", c != nil && c.quorum, err)
	}
}

// Ranks that disagree on the quorum fail Init, every one naming a rank
// with the other setting: their Shrinks would decide differently.
func TestQuorumMismatchAtInit(t *testing.T) {
	oddRankOutAtInit(t, nil, []Option{WithQuorum()}, "GORUN_QUORUM")
}

// oddRankOutAtInit starts 3 ranks, rank 2 with odd and the others with
// rest, and checks that Init fails on every rank with ErrInvalid naming
// a rank of the other side (2, or 0 on rank 2) and setting.
func oddRankOutAtInit(t *testing.T, odd, rest []Option, setting string) {
	t.Helper()
	_, errs, _ := initRanks(t, 3, func(r int) []Option {
		if r == 2 {
			return odd
		}
		return rest
	})
	for r, err := range errs {
		var re *RankError
		want := 2
		if r == 2 {
			want = 0
		}
		if !errors.As(err, &re) || re.Rank != want || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), setting) {
			t.Errorf("rank %d: %v; want ErrInvalid naming rank %d and %s", r, err, want, setting)
		}
	}
}

// With a quorum, two of four ranks that Shrink go on with rank 0, and
// fail with ErrNoQuorum without it; three of four go on.
func TestShrinkWithQuorum(t *testing.T) {
	for _, tc := range []struct {
		left []int // the ranks that close
		ok   bool
	}{{[]int{3}, true}, {[]int{2, 3}, true}, {[]int{0, 1}, false}} {
		cs, errs, _ := initRanks(t, 4, func(int) []Option { return []Option{WithQuorum()} })
		mustAll(t, "init", errs)
		var stay []*Comm
		for r, c := range cs {
			if slices.Contains(tc.left, r) {
				c.Close()
			} else {
				stay = append(stay, c)
			}
		}
		ctx := initTestCtx(t)
		shrunk := make([]*Comm, len(stay))
		errs = onAll(stay, func(c *Comm) (err error) {
			i := slices.Index(stay, c)
			shrunk[i], err = c.Shrink(ctx)
			return err
		})
		for i, err := range errs {
			switch {
			case tc.ok && err != nil:
				t.Errorf("ranks %v closed: rank %d: %v", tc.left, stay[i].Rank(), err)
			case tc.ok && shrunk[i].Size() != len(stay):
				t.Errorf("ranks %v closed: rank %d shrank to %d ranks, want %d", tc.left, stay[i].Rank(), shrunk[i].Size(), len(stay))
			case !tc.ok && !errors.Is(err, ErrNoQuorum):
				t.Errorf("ranks %v closed: rank %d: %v, want ErrNoQuorum", tc.left, stay[i].Rank(), err)
			}
			if shrunk[i] != nil {
				shrunk[i].Close()
			}
		}
	}
}

// A Grow's newcomers count in the quorum once it completed: four ranks,
// rank 3 closes, the three shrink; rank 3 comes back and they grow; then
// ranks 1 and 2 close, and 0 and the newcomer, half of the grown world
// with its rank 0, shrink and go on. Counted against the three that
// shrank before (the base before the Grow), rank 0 alone would have none.
func TestQuorumAfterGrow(t *testing.T) {
	cs, errs, start := initRanks(t, 4, func(int) []Option { return []Option{WithQuorum()} })
	mustAll(t, "init", errs)
	ctx := initTestCtx(t)
	cs[3].Close()
	shrunk := make([]*Comm, 3)
	mustAll(t, "shrink", onAll(cs[:3], func(c *Comm) (err error) {
		shrunk[c.Rank()], err = c.Shrink(ctx)
		return err
	}))
	grown := growJoined(t, ctx, shrunk, func() (*Comm, error) { return start(3) })
	grown[1].Close()
	grown[2].Close()
	last := make([]*Comm, 2)
	errs = onAll([]*Comm{grown[0], grown[3]}, func(c *Comm) (err error) {
		i := min(c.Rank(), 1)
		last[i], err = c.Shrink(ctx)
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shrink after the grow, rank %d: %v (the newcomer must count)", []int{0, 3}[i], err)
		}
		if last[i].Size() != 2 {
			t.Errorf("shrink after the grow: %d ranks, want 2", last[i].Size())
		}
		last[i].Close()
	}
}
