package comm

import (
	"fmt"
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
