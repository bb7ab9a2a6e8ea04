package comm

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/internal/jobenv"
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

// GORUN_PROBE_INTERVAL and WithProbeInterval set the probes as given, the
// option winning, and replace relaxProbes' scaling; a value out of range
// fails with an error naming it.
func TestProbeInterval(t *testing.T) {
	old := osGetenv
	defer func() { osGetenv = old }()
	cpus := runtime.NumCPU()
	crowded := jobEnv{Source: jobenv.LauncherGorun, Size: 8 * cpus, LocalSize: 8 * cpus, Seeds: []string{"127.0.0.1:29500"}} // relaxProbes: 4×
	base := bootstrap.DefaultLANConfig()
	for _, c := range []struct {
		env          string
		opts         []Option
		interval, to time.Duration
	}{
		{"", nil, 4 * base.ProbeInterval, 4 * base.ProbeTimeout},
		{"2s", nil, 2 * time.Second, 1200 * time.Millisecond},
		{"100ms", nil, 100 * time.Millisecond, 60 * time.Millisecond}, // shorter than relaxed: as given
		{"2s", []Option{WithProbeInterval(500 * time.Millisecond)}, 500 * time.Millisecond, 300 * time.Millisecond},
	} {
		osGetenv = mapEnv(map[string]string{"GORUN_PROBE_INTERVAL": c.env})
		cfg, err := newConfig(c.opts...)
		if err != nil {
			t.Fatalf("GORUN_PROBE_INTERVAL=%q: %v", c.env, err)
		}
		bc, err := bootstrapConfig(crowded, osGetenv, cfg)
		if err != nil {
			t.Fatalf("GORUN_PROBE_INTERVAL=%q: %v", c.env, err)
		}
		if bc.ProbeInterval != c.interval || bc.ProbeTimeout != c.to {
			t.Errorf("GORUN_PROBE_INTERVAL=%q, %d options: probes %v/%v, want %v/%v", c.env, len(c.opts), bc.ProbeInterval, bc.ProbeTimeout, c.interval, c.to)
		}
	}
	osGetenv = mapEnv(nil)
	for _, d := range []time.Duration{0, 49 * time.Millisecond, 61 * time.Second} {
		if _, err := newConfig(WithProbeInterval(d)); err == nil || !strings.Contains(err.Error(), "probe interval") {
			t.Errorf("WithProbeInterval(%v): error %v, want one naming the probe interval", d, err)
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
