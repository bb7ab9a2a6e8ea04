package launcher

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Under --elastic, a rank that joined and then froze is stopped once the
// others have ended, and the job fails naming it; a rank that keeps
// reporting is waited for. Before, gorun waited for the frozen rank for
// ever (the survivors shrank past it and finished: examples/train with
// --fault 'rank=1:freeze:write:300'), printing stall reports.
func TestElasticStopsSilentRank(t *testing.T) {
	old := silentFor
	silentFor = 8 * time.Second // above the 5 s heartbeat of a live rank
	t.Cleanup(func() { silentFor = old })

	type result struct {
		stderr string
		err    error
		took   time.Duration
	}
	var res [2]result
	var wg sync.WaitGroup
	for i, mode := range []string{"freeze", "quiet"} {
		wg.Go(func() {
			start := time.Now()
			_, stderr, err := runJob(t, mode, Config{NP: 3, Elastic: true, Timeout: 45 * time.Second})
			res[i] = result{stderr, err, time.Since(start)}
		})
	}
	wg.Wait()

	frozen := res[0]
	var re *RankError
	if !errors.As(frozen.err, &re) || re.Rank != 1 || !errors.Is(frozen.err, ErrRankFailed) {
		t.Fatalf("frozen rank 1: Run returned %v after %v, want a RankError naming rank 1\n%s", frozen.err, frozen.took, frozen.stderr)
	}
	if !strings.Contains(frozen.stderr, "frozen or cut off") || errors.Is(frozen.err, ErrTimeout) {
		t.Errorf("frozen rank 1: stderr does not say why it was stopped:\n%s", frozen.stderr)
	}
	if got := ExitStatus(frozen.err); got != 1 {
		t.Errorf("frozen rank 1: exit status %d, want 1", got)
	}
	if res[1].err != nil {
		t.Errorf("rank 1 reporting while the others ended: Run returned %v after %v, want nil\n%s", res[1].err, res[1].took, res[1].stderr)
	}
	t.Logf("frozen: %v after %v; quiet: ended after %v", frozen.err, frozen.took.Round(100*time.Millisecond), res[1].took.Round(100*time.Millisecond))
}
