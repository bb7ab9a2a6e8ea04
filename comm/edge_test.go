package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// a2aVal is rank r's element i of its AllToAll send buffer.
func a2aVal(r, i int) int32 { return int32(r*1_000_000 + i) }

// TestAllToAllOverlap: send and recv that share memory without being the
// same slice (recv one element after send, and one before) give the same
// result as separate buffers, for blocks sent eagerly and directly.
func TestAllToAllOverlap(t *testing.T) {
	const n = 3
	cs := newLocal(t, n, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	for _, blk := range []int{2, 20_000} {
		for _, shift := range []int{1, -1} {
			t.Run(fmt.Sprintf("block=%d/shift=%d", blk, shift), func(t *testing.T) {
				mustAll(t, "alltoall", onAll(cs, func(c *Comm) error {
					r := c.Rank()
					buf := make([]int32, n*blk+1)
					send, recv := buf[:n*blk], buf[1:]
					if shift < 0 {
						send, recv = recv, send
					}
					for i := range send {
						send[i] = a2aVal(r, i)
					}
					if err := AllToAll(ctx, c, send, recv); err != nil {
						return err
					}
					// Block q of recv is block r of rank q's send.
					return checkBits("alltoall", recv, func(i int) int32 { return a2aVal(i/blk, r*blk+i%blk) })
				}))
			})
		}
	}
}

// TestAllToAllVOverlapRejected: AllToAllV's send and recv must not
// overlap (its doc); one rank passing the same slice fails with ErrInvalid
// naming it, on every rank, rather than moving corrupted data.
func TestAllToAllVOverlapRejected(t *testing.T) {
	const n, blk = 3, 20_000
	for _, culprit := range []int{0, 2} {
		for _, part := range []bool{false, true} {
			t.Run(fmt.Sprintf("culprit=%d/part=%v", culprit, part), func(t *testing.T) {
				cs := newLocal(t, n, WithTimeout(20*time.Second))
				ctx := testCtx(t)
				counts := []int{blk, blk, blk}
				errs := onAll(cs, func(c *Comm) error {
					buf := make([]int32, 2*n*blk)
					send, recv := buf[:n*blk], buf[n*blk:]
					if c.Rank() == culprit {
						recv = send
						if part {
							recv = buf[1 : n*blk+1]
						}
					}
					return AllToAllV(ctx, c, send, counts, nil, recv, counts, nil)
				})
				checkEventually(t, "alltoallv overlap", cs, errs, ErrInvalid, culprit)
			})
		}
	}
}

// TestVOverlap: the v-collectives' overlaps that are allowed give the
// right data: AllGatherV with send anywhere in recv (its own block, or
// straddling a peer's), GatherV and ScatterV with send and recv
// overlapping at the root.
func TestVOverlap(t *testing.T) {
	const n, blk = 3, 20_000
	cs := newLocal(t, n, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	counts := []int{blk, blk, blk}
	for _, off := range []int{0, blk / 2, 1} {
		t.Run(fmt.Sprintf("allgatherv/send=recv[%d:]", off), func(t *testing.T) {
			mustAll(t, "allgatherv", onAll(cs, func(c *Comm) error {
				r := c.Rank()
				recv := make([]int32, n*blk)
				start := off
				if off == 0 {
					start = r * blk // its own block: in place
				}
				send := recv[start : start+blk]
				for i := range send {
					send[i] = a2aVal(r, i)
				}
				if err := AllGatherV(ctx, c, send, recv, counts, nil); err != nil {
					return err
				}
				return checkBits("allgatherv", recv, func(i int) int32 { return a2aVal(i/blk, i%blk) })
			}))
		})
	}
	const root = 1
	for _, off := range []int{0, blk / 2, 2 * blk} {
		t.Run(fmt.Sprintf("gatherv/send=recv[%d:]", off), func(t *testing.T) {
			mustAll(t, "gatherv", onAll(cs, func(c *Comm) error {
				r := c.Rank()
				recv := make([]int32, n*blk)
				send := make([]int32, blk)
				if r == root {
					send = recv[off : off+blk]
				}
				for i := range send {
					send[i] = a2aVal(r, i)
				}
				if err := GatherV(ctx, c, send, recv, counts, nil, root); err != nil || r != root {
					return err
				}
				return checkBits("gatherv", recv, func(i int) int32 { return a2aVal(i/blk, i%blk) })
			}))
		})
		t.Run(fmt.Sprintf("scatterv/recv=send[%d:]", off), func(t *testing.T) {
			mustAll(t, "scatterv", onAll(cs, func(c *Comm) error {
				r := c.Rank()
				send := make([]int32, n*blk)
				recv := make([]int32, blk)
				if r == root {
					for i := range send {
						send[i] = a2aVal(i/blk, i%blk)
					}
					recv = send[off : off+blk]
				}
				if err := ScatterV(ctx, c, send, counts, nil, recv, root); err != nil {
					return err
				}
				return checkBits("scatterv", recv, func(i int) int32 { return a2aVal(r, i) })
			}))
		})
	}
}

// TestTagRange: a tag outside the int32 range it travels in is ErrInvalid
// naming the rank, blocking or started, even when both ranks use it (it
// was a bogus ErrMismatch, "tag -2147483648, this rank 2147483648"); the
// range's ends work.
func TestTagRange(t *testing.T) {
	big := int64(1) << 40 // a variable: no constant overflow where int is 32 bits
	for _, tag := range []int64{math.MaxInt32 + 1, big, math.MinInt32 - 1} {
		if int64(int(tag)) != tag {
			t.Skip("int is 32 bits: every int is a valid tag")
		}
		for _, started := range []bool{false, true} {
			t.Run(fmt.Sprintf("tag=%d/started=%v", tag, started), func(t *testing.T) {
				cs := newLocal(t, 2, WithTimeout(20*time.Second))
				ctx := testCtx(t)
				errs := onAll(cs, func(c *Comm) error {
					return tagRoundTrip(ctx, c, int(tag), started)
				})
				for r, err := range errs {
					var re *RankError
					if !errors.Is(err, ErrInvalid) || !errors.As(err, &re) || !strings.Contains(err.Error(), "int32 range") {
						t.Errorf("rank %d: %v; want ErrInvalid naming a rank, about the int32 range", r, err)
					}
				}
			})
		}
	}
	cs := newLocal(t, 2, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	for _, tag := range []int{math.MaxInt32, math.MinInt32} {
		for _, started := range []bool{false, true} {
			mustAll(t, fmt.Sprintf("tag %d, started %v", tag, started), onAll(cs, func(c *Comm) error {
				return tagRoundTrip(ctx, c, tag, started)
			}))
		}
	}
}

// tagRoundTrip sends rank 0's message to rank 1 with tag, by Send and
// Recv or by ISend and IRecv, and checks it.
func tagRoundTrip(ctx context.Context, c *Comm, tag int, started bool) error {
	buf := []int64{int64(tag), 7}
	if c.Rank() == 1 {
		buf = make([]int64, 2)
	}
	var err error
	switch {
	case c.Rank() == 0 && started:
		err = ISend(ctx, c, buf, 1, tag).Wait(ctx)
	case c.Rank() == 0:
		err = Send(ctx, c, buf, 1, tag)
	case started:
		err = IRecv(ctx, c, buf, 0, tag).Wait(ctx)
	default:
		err = Recv(ctx, c, buf, 0, tag)
	}
	if err == nil && (buf[0] != int64(tag) || buf[1] != 7) {
		return fmt.Errorf("rank %d: message %v", c.Rank(), buf)
	}
	return err
}
