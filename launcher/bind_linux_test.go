package launcher

import (
	"testing"

	"github.com/gorun-hpc/gorun/internal/numa"
	"golang.org/x/sys/unix"
)

// --bind-to: every thread of each local rank runs on the CPUs
// numa.CPUSetFor gives it, and gorun's own threads keep their mask.
func TestBindToCore(t *testing.T) {
	topo, err := numa.System()
	if err != nil {
		t.Skipf("no NUMA topology: %v", err)
	}
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"core", "numa"} {
		t.Run(mode, func(t *testing.T) {
			m, _ := numa.ParseBindMode(mode)
			out, stderr, err := runJob(t, "affinity", Config{NP: 2, Bind: mode})
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, stderr)
			}
			lines := rankLines(t, out)
			for r := 0; r < 2; r++ {
				cpus, err := topo.CPUSetFor(r, 2, m)
				if err != nil {
					t.Fatal(err)
				}
				want := numa.FormatCPUList(cpus)
				if len(lines[r]) != 1 || lines[r][0] != want {
					t.Errorf("rank %d threads run on %q, want only %q", r, lines[r], want)
				}
			}
		})
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil || after != before {
		t.Errorf("gorun's thread mask changed: %v -> %v (%v)", before, after, err)
	}
}
