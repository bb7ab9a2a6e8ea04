package comm

import (
	"path/filepath"
	"testing"
)

// BenchmarkOpOverhead isolates what an operation costs besides moving
// data: an 8-byte allreduce on a world of one rank (no messages), with the
// timeline off and on. Compare with main's binary for the cost when off:
//
//	go test -run '^$' -bench OpOverhead -count 5 ./comm
func BenchmarkOpOverhead(b *testing.B) {
	for _, tl := range []string{"off", "on"} {
		b.Run("timeline="+tl, func(b *testing.B) {
			if tl == "on" {
				needObservable(b)
				b.Setenv("GORUN_TIMELINE", filepath.Join(b.TempDir(), "tl"))
			}
			cs := newLocal(b, 1)
			ctx := testCtx(b)
			v := make([]float64, 1)
			for b.Loop() {
				if err := AllReduce(ctx, cs[0], v, v, Sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
