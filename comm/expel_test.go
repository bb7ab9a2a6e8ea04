package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
)

// worldOf is a bootstrap.World of the named members, seen from rank.
func worldOf(rank int, epoch uint32, names ...string) bootstrap.World {
	w := bootstrap.World{Rank: rank, Size: len(names), Epoch: epoch}
	for r, n := range names {
		w.Members = append(w.Members, bootstrap.Member{Rank: r, Name: n})
	}
	return w
}

// digested sets w's digest to d's bytes.
func digested(w bootstrap.World, d byte) bootstrap.World {
	for i := range w.Digest {
		w.Digest[i] = d
	}
	return w
}

// TestCheckMembership: the members of a new world (3 ranks in process) say
// where they come from; a member that some take for continuing and others
// for a newcomer is found on every rank, and only then.
func TestCheckMembership(t *testing.T) {
	abc := []string{"a", "b", "c"}
	cases := []struct {
		name string
		from []*bootstrap.World // per rank; nil: joins through Init
		want []int
	}{
		{"shrink", []*bootstrap.World{ptr(worldOf(0, 1, "a", "b", "c", "d")), ptr(worldOf(1, 1, "a", "b", "c", "d")), ptr(worldOf(2, 1, "a", "b", "c", "d"))}, nil},
		{"grow with a joiner", []*bootstrap.World{ptr(worldOf(0, 2, "a", "b")), ptr(worldOf(1, 2, "a", "b")), nil}, nil},
		// c was declared dead (world 2 is a, b) and calls Shrink from
		// world 1 while a and b Grow it back in.
		{"shrink back from exclusion", []*bootstrap.World{ptr(worldOf(0, 2, "a", "b")), ptr(worldOf(1, 2, "a", "b")), ptr(worldOf(2, 1, "a", "b", "c"))}, []int{2}},
		// A partition healed: a and b shrank to world 2 without c, and c
		// to a world 2 of itself; both sides grew into one world. Every
		// member is contested; the larger side went on.
		{"healed partition", []*bootstrap.World{ptr(digested(worldOf(0, 2, "a", "b"), 9)), ptr(digested(worldOf(1, 2, "a", "b"), 9)), ptr(digested(worldOf(0, 2, "c"), 1))}, []int{2}},
		// Two sides of a size (a alone, b alone; c joins): the one with
		// the lower digest went on.
		{"healed partition, sides of a size", []*bootstrap.World{ptr(digested(worldOf(0, 2, "a"), 7)), ptr(digested(worldOf(0, 2, "b"), 3)), nil}, []int{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := NewLocal(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			got := make([][]int, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Go(func() { got[r], errs[r] = c.checkMembership(ctx, worldOf(r, 3, abc...), tc.from[r]) })
			}
			wg.Wait()
			for r := range cs {
				if errs[r] != nil || !slices.Equal(got[r], tc.want) {
					t.Fatalf("rank %d: contested %v (%v), want %v", r, got[r], errs[r], tc.want)
				}
			}
			if len(tc.want) == 0 {
				return
			}
			// The contested rank gets ErrExpelled; the others' communicator
			// fails naming it.
			for r, c := range cs {
				err := c.expelled(got[r], "shrink")
				if r == tc.want[0] {
					var re *RankError
					if !errors.As(err, &re) || re.Rank != r || !errors.Is(err, ErrExpelled) {
						t.Errorf("rank %d (expelled): %v", r, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				// Room for a notice from this rank to reach the next before
				// its own check's result does: none must carry ErrExpelled
				// away (CI once saw rank 1's barrier fail with a plain
				// "rank 2: peer failed").
				time.Sleep(20 * time.Millisecond)
				var re *RankError
				if err := c.Barrier(ctx); !errors.As(err, &re) || re.Rank != tc.want[0] || !errors.Is(err, ErrPeerFailed) || !errors.Is(err, ErrExpelled) {
					t.Errorf("rank %d: barrier after the check: %v", r, fmt.Sprint(err))
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A rank that joins a running job through Init and that the members take
// for one of theirs is expelled by the membership check (expel.go): its
// Init fails with ErrExpelled, as a Shrink or Grow does, and returns no
// communicator; the members' grown communicator fails naming it. Three
// ranks; rank 2 closes, the others shrink; rank 2 starts again and they
// grow, each member taking it (membershipHook) for one of the world it
// comes from. Its Init returned a communicator before.
func TestInitExpelledJoinerFails(t *testing.T) {
	const joiner = 2
	cs, errs, start := initRanks(t, 3, func(int) []Option { return nil })
	mustAll(t, "init", errs)
	ctx := initTestCtx(t)
	cs[joiner].Close()
	shrunk := make([]*Comm, joiner)
	mustAll(t, "shrink", onAll(cs[:joiner], func(c *Comm) (err error) {
		shrunk[c.Rank()], err = c.Shrink(ctx)
		return err
	}))
	membershipHook = func(w bootstrap.World, from *bootstrap.World) *bootstrap.World {
		if from == nil || w.Size <= joiner {
			return from
		}
		f := *from
		f.Members = append(slices.Clone(from.Members), w.Members[joiner])
		return &f
	}
	t.Cleanup(func() { membershipHook = nil })
	type result struct {
		c   *Comm
		err error
	}
	joined := make(chan result, 1)
	go func() {
		c, err := start(joiner)
		joined <- result{c, err}
	}()
	grown := make([]*Comm, joiner)
	mustAll(t, "grow", onAll(shrunk, func(c *Comm) (err error) {
		for c.Joiners() == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		grown[c.Rank()], err = c.Grow(ctx)
		return err
	}))
	j := <-joined
	var re *RankError
	if j.c != nil || !errors.As(j.err, &re) || re.Rank != joiner || re.Op != "init" || !errors.Is(j.err, ErrExpelled) {
		t.Errorf("the joiner's Init: communicator %v, error %v; want no communicator and rank %d's ErrExpelled", j.c != nil, j.err, joiner)
	}
	for r, c := range grown {
		err := c.Barrier(ctx)
		if !errors.As(err, &re) || re.Rank != joiner || !errors.Is(err, ErrPeerFailed) || !errors.Is(err, ErrExpelled) {
			t.Errorf("member %d: barrier after the grow: %v; want rank %d expelled", r, err, joiner)
		}
		c.Close()
	}
}
