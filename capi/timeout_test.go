//go:build cgo

package main

import (
	"testing"
	"time"
)

// The C ABI reads GORUN_TIMEOUT as comm does (internal/jobenv): seconds
// or a duration, default 5 minutes, 0 disables.
func TestOpContextFollowsGorunTimeout(t *testing.T) {
	for _, c := range []struct {
		val  string
		want time.Duration // 0: no deadline
	}{{"", 5 * time.Minute}, {"90", 90 * time.Second}, {"2m", 2 * time.Minute}, {"0", 0}} {
		t.Setenv("GORUN_TIMEOUT", c.val)
		ctx, cancel := opContext()
		dl, ok := ctx.Deadline()
		cancel()
		if c.want == 0 {
			if ok {
				t.Errorf("GORUN_TIMEOUT=%q: deadline in %v, want none", c.val, time.Until(dl))
			}
			continue
		}
		if left := time.Until(dl); !ok || left > c.want || left < c.want-time.Minute {
			t.Errorf("GORUN_TIMEOUT=%q: deadline in %v (set %v), want %v", c.val, left, ok, c.want)
		}
	}
}
