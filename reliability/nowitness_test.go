package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/scripts/cluster"
)

// A frozen rank with no witness: one rank per "host" (a network and UTS
// namespace of the namespace cluster, scripts/cluster), so no rank can
// read another's /proc state and only the gossip failure detector can
// find the frozen one (comm/witness.go, bootstrap Config.Running).

// hostsSpec is a 4-rank tcp job of role with rank r on host r of c.
func hostsSpec(c *cluster.Cluster, role string, env ...string) jobSpec {
	return jobSpec{n: len(c.Hosts), role: role, transport: "tcp", timeout: 10 * time.Second,
		env:      env,
		seedHost: c.Hosts[0].IP, seedPort: 20000 + rand.IntN(12000),
		wrap: func(r int) []string {
			h := c.Hosts[r]
			return []string{"nsenter", "--net=/run/netns/" + h.Netns, "--uts=" + filepath.Join(c.Dir, "uts-"+h.Name), "--"}
		}}
}

// TestFrozenNoWitnessTime is TestFrozenRecoveryTime with every rank on a
// host of its own: SIGSTOP of a random rank of 4 to the survivors' first
// error (the gossip detector's report, which must not be a witness's) and
// to their first good allreduce after Shrink. REL_TRIALS jobs (default 3),
// one at a time; it logs median, min and max and asserts no time (the
// figures move with the machine's load: RELIABILITY.md has the runs).
// REL_SHOW_LOGS=1 logs every rank's stderr, memberlist's trace included.
func TestFrozenNoWitnessTime(t *testing.T) {
	if testing.Short() {
		t.Skip("sequential jobs")
	}
	c := cluster.Start(t, cluster.Options{Hosts: 4})
	var took, errAt []time.Duration
	for i := range envInt("REL_TRIALS", 3) {
		victim := rand.IntN(4)
		spec := hostsSpec(c, "recover", "REL_REINIT=0")
		if os.Getenv("REL_SHOW_LOGS") != "" {
			spec.env = append(spec.env, "GORUN_DEBUG=trace")
		}
		d, e, errs := recoveryTrialSpec(t, spec, victim, syscall.SIGSTOP)
		for _, ev := range errs {
			if strings.Contains(ev.Err, "seen on its host") {
				t.Fatalf("trial %d: rank %d learnt of the frozen rank %d from a witness: %s (each rank should be on a host of its own)", i, ev.Rank, victim, ev.Err)
			}
			if ev.ErrRank != victim {
				t.Errorf("trial %d: rank %d names rank %d, not the frozen rank %d: %s", i, ev.Rank, ev.ErrRank, victim, ev.Err)
			}
		}
		if len(errs) > 0 {
			t.Logf("trial %d: rank %d: %s", i, errs[0].Rank, errs[0].Err)
		}
		took, errAt = append(took, d), append(errAt, e)
		t.Logf("trial %d, victim %d: first error on every survivor %v after the SIGSTOP, first good allreduce after %v", i, victim, e.Round(time.Millisecond), d.Round(time.Millisecond))
	}
	t.Logf("no witness, tcp, %d trials: SIGSTOP → first error on every survivor: %s; → first good allreduce after Shrink: %s",
		len(took), spread(errAt), spread(took))
}

// spread formats the median, min and max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Sorted(slices.Values(ds))
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("median %v, min %v, max %v (n=%d)", r(ds[len(ds)/2]), r(ds[0]), r(ds[len(ds)-1]), len(ds))
}
