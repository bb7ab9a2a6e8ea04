package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/scripts/cluster"
)

// TestRealSlurm runs Debian's Slurm (slurmctld, a slurmd in each of two
// namespace hosts, munge) and checks srun -N2 -n4, sbatch running gorun
// (which places its ranks with srun), and an allocation smaller than -np.
func TestRealSlurm(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	c := cluster.Start(t, cluster.Options{Hosts: 2, Slurm: true})
	t.Setenv("SLURM_CONF", c.SlurmConf)
	h1, h2 := c.Hosts[0].Name, c.Hosts[1].Name
	work := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = work
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}

	out := run("srun", "-N2", "-n4", "--ntasks-per-node=2", "sh", "-c", `echo "$(hostname) $SLURM_PROCID $SLURM_LOCALID"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	want := []string{h1 + " 0 0", h1 + " 1 1", h2 + " 2 0", h2 + " 3 1"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("srun -N2 -n4 printed %q, want %q", lines, want)
	}

	gorun := filepath.Join(work, "gorun")
	if out, err := exec.Command("go", "build", "-o", gorun, "github.com/gorun-hpc/gorun/cmd/gorun").CombinedOutput(); err != nil {
		t.Skipf("cannot build gorun: %v\n%s", err, out)
	}
	script := filepath.Join(work, "job.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n"+gorun+` -np 4 /bin/sh -c 'echo "$(hostname) $SLURM_PROCID $SLURM_LOCALID"'`+"\n"+
		"echo np8; "+gorun+" -np 8 /bin/true; echo status=$?\n"), 0o755)
	outFile := filepath.Join(work, "job.out")
	run("sbatch", "-W", "-N2", "-n4", "--ntasks-per-node=2", "-o", outFile, script)
	b, _ := os.ReadFile(outFile)
	got := string(b)
	// srun's --label tags the lines.
	for _, w := range []string{"0: " + h1 + " 0 0\n", "1: " + h1 + " 1 1\n", "2: " + h2 + " 2 0\n", "3: " + h2 + " 3 1\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("sbatch: gorun's output has no %q:\n%s", w, got)
		}
	}
	if !strings.Contains(got, "-np 8 but the Slurm allocation has 4 tasks") || strings.Contains(got, "status=0") {
		t.Errorf("sbatch: gorun -np 8 in a 4-task allocation did not fail clearly:\n%s", got)
	}
}
