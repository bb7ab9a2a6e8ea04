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
		scatters := map[string]func(c *Comm, send, recv []int32) error{
			"scatterv": func(c *Comm, send, recv []int32) error { return ScatterV(ctx, c, send, counts, nil, recv, root) },
			"scatter":  func(c *Comm, send, recv []int32) error { return Scatter(ctx, c, send, recv, root) },
		}
		for name, scatter := range scatters {
			t.Run(fmt.Sprintf("%s/recv=send[%d:]", name, off), func(t *testing.T) {
				mustAll(t, name, onAll(cs, func(c *Comm) error {
					r := c.Rank()
					send := make([]int32, n*blk)
					recv := make([]int32, blk)
					if r == root {
						for i := range send {
							send[i] = a2aVal(i/blk, i%blk)
						}
						recv = send[off : off+blk]
					}
					if err := scatter(c, send, recv); err != nil {
						return err
					}
					return checkBits(name, recv, func(i int) int32 { return a2aVal(r, i) })
				}))
			})
		}
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

// TestP2PSelf: messages from a rank to itself. Started ones are matched
// in order within their group and copied, alongside messages to a peer; a
// blocking Send or Recv joins a started counterpart; a self message with
// no counterpart in its group is ErrInvalid, saying it could never
// complete, and a disagreement in tag or length is ErrMismatch, both
// naming the rank, instead of a hang.
func TestP2PSelf(t *testing.T) {
	cs := newLocal(t, 2, WithTimeout(20*time.Second))
	ctx := testCtx(t)
	for _, m := range []int{1, 20_000} {
		mustAll(t, fmt.Sprintf("grouped, %d elements", m), onAll(cs, func(c *Comm) error {
			r, peer := c.Rank(), 1-c.Rank()
			out := [][]int32{make([]int32, m), make([]int32, m), make([]int32, m)}
			for k := range out {
				for i := range out[k] {
					out[k][i] = int32(r*1_000_000 + k*100_000 + i)
				}
			}
			in := [][]int32{make([]int32, m), make([]int32, m), make([]int32, m)}
			// Receives started before and after their sends, tags in order.
			reqs := []*Request{IRecv(ctx, c, in[0], r, 10), ISend(ctx, c, out[0], r, 10),
				ISend(ctx, c, out[1], peer, 11), ISend(ctx, c, out[2], r, 12),
				IRecv(ctx, c, in[1], peer, 11), IRecv(ctx, c, in[2], r, 12)}
			if err := WaitAll(ctx, reqs...); err != nil {
				return err
			}
			for k, src := range []int{r, peer, r} {
				if err := checkBits(fmt.Sprintf("message %d", k), in[k], func(i int) int32 { return int32(src*1_000_000 + k*100_000 + i) }); err != nil {
					return err
				}
			}
			// A blocking Send joins the IRecv started before it, a
			// blocking Recv the ISend.
			got := make([]int32, m)
			q := IRecv(ctx, c, got, r, 3)
			if err := Send(ctx, c, out[1], r, 3); err != nil {
				return err
			}
			if err := q.Wait(ctx); err != nil {
				return err
			}
			if err := checkBits("send joined", got, func(i int) int32 { return out[1][i] }); err != nil {
				return err
			}
			q = ISend(ctx, c, out[2], r, 4)
			if err := Recv(ctx, c, got, r, 4); err != nil {
				return err
			}
			if err := q.Wait(ctx); err != nil {
				return err
			}
			return checkBits("recv joined", got, func(i int) int32 { return out[2][i] })
		}))
	}

	cases := []struct {
		name  string
		f     func(ctx context.Context, c *Comm) error
		want  error
		words string
	}{
		{"blocking send", func(ctx context.Context, c *Comm) error {
			return Send(ctx, c, []int32{1}, c.Rank(), 0)
		}, ErrInvalid, "could never complete"},
		{"blocking recv", func(ctx context.Context, c *Comm) error {
			return Recv(ctx, c, []int32{1}, c.Rank(), 0)
		}, ErrInvalid, "could never complete"},
		{"isend alone", func(ctx context.Context, c *Comm) error {
			return ISend(ctx, c, []int32{1}, c.Rank(), 0).Wait(ctx)
		}, ErrInvalid, "could never complete"},
		{"irecv, then a recv from itself", func(ctx context.Context, c *Comm) error {
			q := IRecv(ctx, c, []int32{1}, c.Rank(), 0)
			return errors.Join(Recv(ctx, c, []int32{1}, c.Rank(), 0), q.Wait(ctx))
		}, ErrInvalid, "could never complete"},
		{"tags", func(ctx context.Context, c *Comm) error {
			return WaitAll(ctx, ISend(ctx, c, []int32{1}, c.Rank(), 1), IRecv(ctx, c, []int32{1}, c.Rank(), 2))
		}, ErrMismatch, "tag 1"},
		{"lengths", func(ctx context.Context, c *Comm) error {
			return WaitAll(ctx, ISend(ctx, c, []int32{1, 2}, c.Rank(), 1), IRecv(ctx, c, []int32{1}, c.Rank(), 1))
		}, ErrMismatch, "2×int32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 2, WithTimeout(20*time.Second))
			ctx := testCtx(t)
			errs := onAll(cs, func(c *Comm) error {
				if c.Rank() == 1 {
					return nil // its next operation fails
				}
				return tc.f(ctx, c)
			})
			t.Logf("rank 0: %v", errs[0])
			if !strings.Contains(fmt.Sprint(errs[0]), tc.words) {
				t.Errorf("rank 0: %v; want it to say %q", errs[0], tc.words)
			}
			checkEventually(t, tc.name, cs, errs, tc.want, 0)
		})
	}
}
