package comm

import (
	"runtime"
	"testing"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Init's shareProcs lowers GOMAXPROCS to the rank's share of the CPUs it
// shares where GOMAXPROCS is Go's default or the launcher's, and leaves a
// user's alone; the engines of the communicator and of its hierarchical
// sub-communicators note the result.
func TestShareProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	n := runtime.NumCPU()
	for _, tc := range []struct {
		name         string
		env          map[string]string
		set          int // runtime.GOMAXPROCS before
		cpus, shares int
		want         int
	}{
		{"default", nil, n, n, 2 * n, 1},
		{"default, one CPU each", nil, n, n, n, 1},
		{"launcher's", map[string]string{"GOMAXPROCS": "2", jobenv.Procs: "2"}, 2, 2, 4, 1},
		{"launcher's, changed by the program", map[string]string{"GOMAXPROCS": "2", jobenv.Procs: "2"}, 3, 2, 4, 3},
		{"user's variable", map[string]string{"GOMAXPROCS": "2"}, 2, 2, 4, 2},
		{"program's own", nil, n + 1, n, 4 * n, n + 1},
		{"as many CPUs as the default", nil, n, 2 * n, 2, n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 3)
			c := cs[0]
			cfg := *c.cfg
			cfg.cpus, cfg.cpuSharers = tc.cpus, tc.shares
			c.cfg = &cfg
			// Sub-communicators made before shareProcs runs, as newComm
			// makes the hierarchical ones.
			c.hier = &hierComms{local: cs[1], cross: cs[2]}
			runtime.GOMAXPROCS(tc.set)
			for _, x := range cs {
				x.eng.SetWait(x.cfg.waitPolicy())
			}
			shareProcs(c, func(k string) string { return tc.env[k] })
			c.hier = nil
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Errorf("GOMAXPROCS %d, want %d", got, tc.want)
			}
			for i, x := range cs {
				if got := x.eng.Procs(); got != tc.want {
					t.Errorf("communicator %d's engine notes GOMAXPROCS %d, want %d", i, got, tc.want)
				}
			}
		})
	}
}
