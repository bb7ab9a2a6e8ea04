package comm

import (
	"os"
	"slices"
	"testing"

	"github.com/gorun-hpc/gorun/internal/numa"
)

func TestApplyBind(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GORUN_BIND" {
				return v
			}
			return ""
		}
	}
	c := &Comm{cfg: &config{}, localRank: 0, localSize: 1}
	if err := applyBind(c, env("sideways")); err == nil {
		t.Fatal("GORUN_BIND=sideways accepted")
	}
	if err := applyBind(c, env("")); err != nil {
		t.Fatal(err)
	}
	before, err := numa.Affinity(os.Getpid())
	if err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	// The only rank on its host binds to every core (its whole share), so
	// the test process keeps its CPUs; the call must succeed and leave the
	// process on exactly the set CPUSetFor chose.
	if err := applyBind(c, env("core")); err != nil {
		t.Fatal(err)
	}
	topo, err := numa.System()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := topo.CPUSetFor(0, 1, numa.BindCore)
	got, _ := numa.Affinity(os.Getpid())
	if !slices.Equal(got, want) {
		t.Fatalf("affinity %v after GORUN_BIND=core, want %v (before: %v)", got, want, before)
	}
	numa.BindProcess(before)
}
