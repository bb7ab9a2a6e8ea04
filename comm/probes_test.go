package comm

import (
	"runtime"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
)

func TestRelaxProbes(t *testing.T) {
	cpus := runtime.NumCPU()
	base := bootstrap.DefaultLANConfig()
	for _, c := range []struct {
		local, size int
		want        int
	}{
		{local: 2 * cpus, size: 64, want: 1},       // two ranks per CPU: the defaults
		{local: 4 * cpus, size: 64, want: 2},       // four per CPU: twice as patient
		{local: 1000 * cpus, size: 10000, want: 8}, // capped
		{local: -1, size: 6 * cpus, want: 3},       // local size unknown: the job size
	} {
		bc := base
		relaxProbes(&bc, jobEnv{LocalSize: c.local, Size: c.size})
		if bc.ProbeInterval != base.ProbeInterval*timeFactor(c.want) || bc.ProbeTimeout != base.ProbeTimeout*timeFactor(c.want) {
			t.Errorf("local %d of %d on %d CPUs: probes %v/%v, want ×%d", c.local, c.size, cpus, bc.ProbeInterval, bc.ProbeTimeout, c.want)
		}
	}
}

func timeFactor(n int) time.Duration { return time.Duration(n) }

func TestSpinFor(t *testing.T) {
	cpus := runtime.NumCPU()
	if spinFor(0) != 0 || spinFor(cpus+1) != 0 {
		t.Errorf("unknown or oversubscribed host: spin %v / %v, want the provider default", spinFor(0), spinFor(cpus+1))
	}
	if spinFor(1) == 0 || spinFor(cpus) == 0 {
		t.Errorf("a CPU per rank: spin %v / %v, want a long spin", spinFor(1), spinFor(cpus))
	}
}
