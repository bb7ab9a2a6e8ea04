package comm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// dearMessages is a tuning whose mem and tcp messages cost 1000 times
// cost.go's: its tables choose the fewest messages.
func dearMessages(t *testing.T) (*collectives.Tuning, []byte) {
	t.Helper()
	f := collectives.TuningFile{Comment: "comm's test", Costs: map[string]collectives.Cost{}}
	for _, p := range []string{"mem", "tcp"} {
		k, _ := collectives.CostOf(p)
		k.Alpha *= 1000
		k.Latency *= 1000
		f.Costs[p] = k
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	tu, err := collectives.ParseTuning(b)
	if err != nil {
		t.Fatal(err)
	}
	return tu, b
}

// TestTuningChoosesAlgorithms: a communicator with a tuning
// (WithTuning, or GORUN_COST_FILE) takes its algorithms from the tuning's
// table, which differs from cost.go's somewhere, and its allreduces give
// the right sums there.
func TestTuningChoosesAlgorithms(t *testing.T) {
	tu, file := dearMessages(t)
	path := filepath.Join(t.TempDir(), "tuning.json")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"WithTuning", "GORUN_COST_FILE"} {
		t.Run(how, func(t *testing.T) {
			var opts []Option
			if how == "WithTuning" {
				opts = append(opts, WithTuning(tu))
			} else {
				t.Setenv(jobenv.CostFile, path)
			}
			const n = 8
			cs := newLocal(t, n, opts...)
			c := cs[0]
			mine := tu.Table(c.costProvider(), n, c.costCPUs())
			builtin := collectives.TableFor(c.costProvider(), n, c.costCPUs())
			differ := 0
			for i := range 27 {
				bytes := 4 << i
				for _, c := range cs {
					if got, want := c.algoFor(collectives.AllReduce, bytes), mine.Algo(collectives.AllReduce, bytes); got != want {
						t.Fatalf("rank %d, %d B: %s, the tuning's table %s", c.Rank(), bytes, got, want)
					}
				}
				if mine.Algo(collectives.AllReduce, bytes) == builtin.Algo(collectives.AllReduce, bytes) {
					continue
				}
				differ++
				if differ > 2 {
					continue
				}
				ctx := testCtx(t)
				mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
					b := make([]int32, bytes/4)
					for i := range b {
						b[i] = int32(c.Rank() + i%7)
					}
					if err := AllReduce(ctx, c, b, b, Sum); err != nil {
						return err
					}
					for i, v := range b {
						if want := int32(n*(n-1)/2 + n*(i%7)); v != want {
							return errors.New("wrong sum by " + c.algoFor(collectives.AllReduce, bytes).String())
						}
					}
					return nil
				}))
			}
			if differ == 0 {
				t.Fatal("the tuning changed no allreduce choice at 8 ranks: the test checks nothing")
			}
		})
	}
}

// TestTuningMismatchAtInit: ranks whose tunings differ fail Init, every
// one naming a rank with the other and GORUN_COST_FILE: their tables could
// choose different algorithms for one call.
func TestTuningMismatchAtInit(t *testing.T) {
	tu, _ := dearMessages(t)
	oddRankOutAtInit(t, []Option{WithTuning(tu)}, nil, "GORUN_COST_FILE")
}

// TestTuningFileRefused: a GORUN_COST_FILE that is missing or no fit's
// fails NewLocal, naming the variable, the file and what is wrong, and so
// does the launcher's CheckEnv for a bad one (a missing one is left to
// the ranks: they may run on hosts that have it).
func TestTuningFileRefused(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"costs": {"tcp": {"Alpha": -1}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{bad, "costs.tcp: Alpha: -1"},
		{filepath.Join(dir, "none.json"), "no such file"},
	} {
		env := func(k string) string {
			if k == jobenv.CostFile {
				return tc.path
			}
			return ""
		}
		errs := map[string]error{"readTunables": func() error { _, err := readTunables(env); return err }()}
		if tc.path == bad {
			errs["CheckEnv"] = CheckEnv(env, 4)
		} else if err := CheckEnv(env, 4); err != nil {
			t.Errorf("CheckEnv, a file this host lacks (another host's ranks may have it): %v", err)
		}
		for what, err := range errs {
			if err == nil || !strings.Contains(err.Error(), jobenv.CostFile) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s, %s: %v; want an error naming %s, the file and %q", what, tc.path, err, jobenv.CostFile, tc.want)
			}
		}
		t.Setenv(jobenv.CostFile, tc.path)
		if cs, err := NewLocal(testCtx(t), 2); err == nil || !strings.Contains(err.Error(), tc.want) {
			for _, c := range cs {
				c.Close()
			}
			t.Errorf("NewLocal with %s: %v; want %q", tc.path, err, tc.want)
		}
	}
}
