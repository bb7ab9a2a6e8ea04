package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A member the others shrank without while it was alive (a witness saw it
// stopped; it then resumed) calls Shrink from its old world: it must learn
// that the job went on without it (ErrExpelled), not wait for the others
// to leave and then agree on a world of itself. With push/pull slowed
// down, only the msgAsk answer can tell it; with push/pull at its default,
// either can.
func TestExpelledNodeLearnsIt(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(int, *Config)
	}{
		{"ask", func(i int, c *Config) { slowGossip(i, c); c.PushPullInterval = time.Hour }},
		{"default", slowGossip},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, victim := range []int{0, 2} { // the old coordinator, and a member
				nodes := startWorld(t, "expel-"+c.name, 4, c.mod)
				nodes[(victim+1)%4].Witnessed(1, victim)
				var survivors []*Node
				for r, n := range nodes {
					if r != victim {
						survivors = append(survivors, n)
					}
				}
				for _, w := range shrinkAll(t, survivors, 10*time.Second) {
					if w.Size != 3 || w.Epoch != 2 {
						t.Fatalf("survivors' world %+v, want 3 ranks of epoch 2", w)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				w, err := nodes[victim].Shrink(ctx)
				cancel()
				if !errors.Is(err, ErrExpelled) {
					t.Fatalf("victim rank %d: Shrink returned world %+v, error %v; want ErrExpelled", victim, w, err)
				}
				t.Logf("victim rank %d: %v", victim, err)
				// The survivors go on: a second Shrink among them still agrees.
				for _, w := range shrinkAll(t, survivors, 10*time.Second) {
					if w.Size != 3 || w.Epoch != 3 {
						t.Fatalf("survivors' second world %+v, want 3 ranks of epoch 3", w)
					}
				}
				closeAll(nodes)
			}
		})
	}
}

// The same after the others finished and left while the victim was away:
// their leave notice reaches the members they had found gone, and the
// victim learns that the job ran past it instead of agreeing on a world of
// itself once nobody else is left.
func TestExpelledNodeLearnsItAfterTheJobLeft(t *testing.T) {
	nodes := startWorld(t, "expel-left", 3, slowGossip)
	nodes[0].Witnessed(1, 2)
	survivors := nodes[:2]
	shrinkAll(t, survivors, 10*time.Second)
	closeAll(survivors)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := nodes[2].Shrink(ctx)
	if !errors.Is(err, ErrExpelled) {
		t.Fatalf("victim: Shrink returned world %+v, error %v; want ErrExpelled", w, err)
	}
	t.Logf("victim: %v", err)
}

// Of the two sides of a partition (two worlds of one epoch), exactly one
// goes on: the larger, or of two of a size the one with the lower digest.
func TestGoesOn(t *testing.T) {
	lo, hi := [digestLen]byte{1}, [digestLen]byte{2}
	for _, c := range []struct {
		size  int
		d     [digestLen]byte
		other int
		od    [digestLen]byte
		want  bool
	}{
		{3, hi, 1, lo, true},  // the larger, whatever the digests
		{1, lo, 3, hi, false}, // the smaller
		{2, lo, 2, hi, true},  // a tie: the lower digest
		{2, hi, 2, lo, false},
	} {
		if got := goesOn(c.size, c.d, c.other, c.od); got != c.want {
			t.Errorf("goesOn(%d, %x, %d, %x) = %v, want %v", c.size, c.d[0], c.other, c.od[0], got, c.want)
		}
		if back := goesOn(c.other, c.od, c.size, c.d); back == c.want {
			t.Errorf("both or neither of (%d, %x) and (%d, %x) go on", c.size, c.d[0], c.other, c.od[0])
		}
	}
}

// A member the others expelled (comm's membership check found it came from
// the side of a partition that does not go on) but whose own check failed,
// so that it calls Shrink with them: their Shrink leaves it out (Expel),
// and its own fails with ErrExpelled instead of agreeing on all of them
// again, which it did before Expel, it being alive and in every view.
func TestExpelledMemberShrinksWithTheOthers(t *testing.T) {
	nodes := startWorld(t, "expel-member", 3, slowGossip)
	defer closeAll(nodes)
	const victim = 2
	for _, n := range nodes[:victim] {
		n.Expel(victim)
		n.Expel(n.World().Rank) // itself: ignored
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		w, err := nodes[victim].Shrink(ctx)
		if err == nil {
			err = fmt.Errorf("agreed on %+v", w)
		}
		errc <- err
	}()
	for _, w := range shrinkAll(t, nodes[:victim], 10*time.Second) {
		if w.Size != 2 || w.Epoch != 2 {
			t.Fatalf("the others' world %+v, want 2 ranks of epoch 2", w)
		}
	}
	if err := <-errc; !errors.Is(err, ErrExpelled) {
		t.Fatalf("expelled rank %d: Shrink: %v; want ErrExpelled", victim, err)
	}
}
