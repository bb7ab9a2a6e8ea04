package reliability

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// A frozen rank (SIGSTOP, from GORUN_FAULT freeze at its Nth write or from
// the test) is a hang, not a death: its sockets stay open. Every survivor
// must still fail within the communicator's timeout, and the error should
// name the frozen rank; the test fails on a hang and counts the names.
func TestFrozenRankDetected(t *testing.T) {
	const timeout = 5 * time.Second
	byKey := map[string][]time.Duration{}
	named, total := 0, 0
	type result struct {
		key      string
		detect   []time.Duration
		named    int
		failures []string
	}
	var cases []struct{ tr, how string }
	for _, tr := range []string{"tcp", "shm"} {
		for _, how := range []string{"fault:12", "fault:40", "sigstop"} {
			cases = append(cases, struct{ tr, how string }{tr, how})
		}
	}
	results := make(chan result, len(cases))
	for i, c := range cases {
		go func() {
			trialSlots <- struct{}{}
			defer func() { <-trialSlots }()
			victim := 1 + i%3
			res := result{key: c.tr + " " + c.how}
			spec := jobSpec{n: 4, role: "coll", transport: c.tr, timeout: timeout,
				env: []string{"REL_OP=allreduce", "REL_COUNT=256", "REL_HOLD_MS=1000", "REL_REINIT=0"}}
			var n int
			if _, err := fmt.Sscanf(c.how, "fault:%d", &n); err == nil {
				spec.env = append(spec.env, fmt.Sprintf("GORUN_FAULT=rank=%d:freeze:write:%d", victim, n))
			}
			j := startJob(t, spec)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, rk := range j.ranks {
				if _, ok := rk.waitEvent(ctx, "ready"); !ok {
					res.failures = append(res.failures, fmt.Sprintf("rank %d never ready\n%s", rk.id, j.logs()))
					results <- res
					return
				}
			}
			frozeAt := time.Now()
			if c.how == "sigstop" {
				time.Sleep(50 * time.Millisecond)
				frozeAt = time.Now()
				j.ranks[victim].signal(syscall.SIGSTOP)
			}
			for _, rk := range j.ranks {
				if rk.id == victim {
					continue
				}
				e, ok := rk.waitEvent(ctx, "error")
				if !ok {
					res.failures = append(res.failures, fmt.Sprintf("rank %d: no error (hang) with rank %d frozen\n%s", rk.id, victim, rk.log()))
					continue
				}
				d := time.Unix(0, e.T).Sub(frozeAt)
				res.detect = append(res.detect, d)
				if d > timeout+2*time.Second {
					res.failures = append(res.failures, fmt.Sprintf("rank %d: error after %v, timeout %v", rk.id, d, timeout))
				}
				if e.ErrRank == victim {
					res.named++
				} else {
					t.Logf("%s victim %d: rank %d names rank %d: %s", res.key, victim, rk.id, e.ErrRank, e.Err)
				}
			}
			results <- res
		}()
	}
	for range cases {
		r := <-results
		for _, f := range r.failures {
			t.Errorf("%s: %s", r.key, f)
		}
		byKey[r.key] = append(byKey[r.key], r.detect...)
		named += r.named
		total += len(r.detect)
	}
	report(t, "freeze", byKey)
	t.Logf("%d of %d survivors named the frozen rank (timeout %v)", named, total, timeout)
}

// TestFrozenRecoveryTime is TestRecoveryTime with the victim frozen
// (SIGSTOP) instead of killed: its sockets stay open, so the survivors learn
// of it from its witnesses on the host (comm/witness.go) or from gossip.
// REL_TRIALS jobs per transport, one at a time; it logs the figures and
// asserts no time.
func TestFrozenRecoveryTime(t *testing.T) { recoveryTimes(t, syscall.SIGSTOP, "SIGSTOP") }
