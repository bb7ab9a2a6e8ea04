package comm

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// CreateGroup is collective over its members only: the other ranks go on
// with messages and a group of their own meanwhile, and the parent still
// works for every rank after.
func TestCreateGroup(t *testing.T) {
	for _, tr := range []string{"mem", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			cs := newLocal(t, 5, WithTransport(tr))
			ctx := testCtx(t)
			members, others := []int{3, 1, 4}, []int{2, 0}
			errs := onAll(cs, func(c *Comm) error {
				group := others
				if slices.Contains(members, c.Rank()) {
					group = members
				} else {
					// Messages between the non-members, on the parent,
					// while the members make their group.
					peer := others[0] + others[1] - c.Rank()
					v := []int32{int32(c.Rank())}
					if c.Rank() == 0 {
						if err := Send(ctx, c, v, peer, 1); err != nil {
							return err
						}
					} else if err := Recv(ctx, c, v, peer, 1); err != nil || v[0] != 0 {
						return fmt.Errorf("recv from rank 0: %v %v", err, v)
					}
				}
				g, err := c.CreateGroup(ctx, group, 5)
				if err != nil {
					return err
				}
				defer g.Close()
				if want := slices.Index(group, c.Rank()); g.Rank() != want || g.Size() != len(group) {
					return fmt.Errorf("rank %d of %d in the group, want %d of %d", g.Rank(), g.Size(), want, len(group))
				}
				v := []int64{int64(c.Rank())}
				if err := AllReduce(ctx, g, v, v, Sum); err != nil {
					return err
				}
				want := int64(0)
				for _, r := range group {
					want += int64(r)
				}
				if v[0] != want {
					return fmt.Errorf("group sum %d, want %d", v[0], want)
				}
				w := []float32{1}
				if err := AllReduce(ctx, c, w, w, Sum); err != nil || w[0] != 5 {
					return fmt.Errorf("parent after the groups: %v %v", err, w)
				}
				return nil
			})
			mustAll(t, "create group", errs)
		})
	}
}

func TestCreateGroupErrors(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 3)
	errs := onAll(cs, func(c *Comm) error {
		ranks := []int{0, 1, 2}
		if c.Rank() == 2 {
			ranks = []int{0, 2, 1}
		}
		_, err := c.CreateGroup(ctx, ranks, 9)
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: members listing other orders: %v, want ErrMismatch", r, err)
		}
	}

	for _, bad := range [][]int{{1}, {0, 2}, {0, 0, 1}} {
		cs := newLocal(t, 2)
		var re *RankError
		if _, err := cs[0].CreateGroup(ctx, bad, 1); !errors.Is(err, ErrInvalid) || !errors.As(err, &re) || re.Rank != 0 {
			t.Fatalf("CreateGroup(%v) on rank 0: %v, want ErrInvalid naming rank 0", bad, err)
		}
		if err := cs[1].Barrier(ctx); !errors.Is(err, ErrInvalid) {
			t.Fatalf("rank 1 after rank 0's CreateGroup(%v): %v, want ErrInvalid", bad, err)
		}
	}
}
