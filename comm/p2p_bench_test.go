package comm

import (
	"fmt"
	"testing"
)

// BenchmarkSendRecv: a ping-pong of blocking Send and Recv between two
// in-process ranks (one iteration is a round trip), and an exchange in
// which both ranks ISend before they IRecv (a group, p2p.go).
//
//	go test -run '^$' -bench SendRecv ./comm
func BenchmarkSendRecv(b *testing.B) {
	for _, bytes := range []int64{8, 1 << 20} {
		b.Run("pingpong/bytes="+sizeName(bytes), func(b *testing.B) {
			cs := newLocal(b, 2)
			ctx := testCtx(b)
			bufs := [][]byte{make([]byte, bytes), make([]byte, bytes)}
			benchRanks(b, cs, 2*bytes, 1, func(c *Comm) error {
				r := c.Rank()
				if r == 0 {
					if err := Send(ctx, c, bufs[r], 1, 0); err != nil {
						return err
					}
					return Recv(ctx, c, bufs[r], 1, 0)
				}
				if err := Recv(ctx, c, bufs[r], 0, 0); err != nil {
					return err
				}
				return Send(ctx, c, bufs[r], 0, 0)
			})
		})
		b.Run(fmt.Sprintf("crossed/bytes=%s", sizeName(bytes)), func(b *testing.B) {
			cs := newLocal(b, 2)
			ctx := testCtx(b)
			out := [][]byte{make([]byte, bytes), make([]byte, bytes)}
			in := [][]byte{make([]byte, bytes), make([]byte, bytes)}
			benchRanks(b, cs, 2*bytes, 1, func(c *Comm) error {
				r := c.Rank()
				return WaitAll(ctx, ISend(ctx, c, out[r], 1-r, 0), IRecv(ctx, c, in[r], 1-r, 0))
			})
		})
	}
}
