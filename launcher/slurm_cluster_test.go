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

	// In the same kind of allocation: stopping, failures and flags under
	// srun (slurm.go, marker.go).
	script = filepath.Join(work, "flags.sh")
	os.WriteFile(script, []byte(`#!/bin/sh
G=`+gorun+`
echo "== int"
: >int.out
$G -np 4 --kill-grace 1s /bin/sh -c 'trap "" TERM; echo up; sleep 60' >int.out 2>&1 &
gp=$!
i=0; while [ "$(grep -c up int.out 2>/dev/null)" != 4 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
kill -INT $gp; wait $gp; echo "status=$?"
i=0; while squeue -h -s -j $SLURM_JOB_ID -o %i | grep -q '\.[0-9]*$' && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
echo "steps: $(squeue -h -s -j $SLURM_JOB_ID -o %i | grep '\.[0-9]*$' | tr '\n' ' ')"
echo "== usr"
: >usr.out
$G -np 4 /bin/sh -c 'trap "echo usr1; exit 0" USR1; echo up; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; echo nosig; exit 5' >usr.out 2>&1 &
gp=$!
i=0; while [ "$(grep -c up usr.out 2>/dev/null)" != 4 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
kill -USR1 $gp; wait $gp; echo "status=$?"; sort usr.out
echo "== exit"
$G -np 4 /bin/sh -c '[ $SLURM_PROCID = 2 ] && exit 3; sleep 30'; echo "status=$?"
echo "== signal"
$G -np 4 /bin/sh -c '[ $SLURM_PROCID = 2 ] && kill -s USR1 $$; sleep 30'; echo "status=$?"
echo "== exit138"
$G -np 4 /bin/sh -c '[ $SLURM_PROCID = 2 ] && exit 138; sleep 30'; echo "status=$?"
echo "== wdir"
$G -np 2 -wdir /tmp /bin/pwd
$G -np 2 -wdir /nonexistent-gorun-wdir /bin/pwd; echo "status=$?"
echo "== npernode"
$G -N 1 /bin/hostname
echo "== gomaxprocs"
$G -np 1 /bin/sh -c 'echo "gomaxprocs=$GOMAXPROCS"'
echo "== output"
$G -np 2 --output-filename logs /bin/sh -c 'echo "task $SLURM_PROCID"'; cat logs/rank.1/stdout
`), 0o755)
	outFile = filepath.Join(work, "flags.out")
	run("sbatch", "-W", "-N2", "-n4", "--ntasks-per-node=2", "-o", outFile, script)
	b, _ = os.ReadFile(outFile)
	got = string(b)
	section := func(name string) string {
		_, after, _ := strings.Cut(got, "== "+name+"\n")
		before, _, _ := strings.Cut(after, "\n== ")
		return before + "\n"
	}
	if s := section("int"); !strings.Contains(s, "status=130") || !strings.Contains(s, "\nsteps: \n") {
		t.Errorf("SIGINT to gorun under srun, tasks ignoring SIGTERM: want status 130 and no step left:\n%s", s)
	}
	// SIGUSR1 to gorun reaches every task (scancel --signal=USR1 of the
	// step), whose wrappers survive it; the job goes on to exit 0.
	if s := section("usr"); !strings.Contains(s, "status=0\n") || strings.Count(s, ": usr1\n") != 4 {
		t.Errorf("SIGUSR1 to gorun under srun: want every task's trap to run and status 0:\n%s", s)
	}
	if s := section("exit"); !strings.Contains(s, "gorun: rank 2 ("+h2+") exited with status 3") || !strings.Contains(s, "status=3") {
		t.Errorf("task 2 exiting with 3 under srun:\n%s", s)
	}
	// Both end with the shell status 138; the task wrapper's marker says which.
	if s := section("signal"); !strings.Contains(s, "gorun: rank 2 ("+h2+") was killed by signal 10 (user defined signal 1)") || !strings.Contains(s, "status=138") {
		t.Errorf("task 2 killed by SIGUSR1 under srun:\n%s", s)
	}
	if s := section("exit138"); !strings.Contains(s, "gorun: rank 2 ("+h2+") exited with status 138") || !strings.Contains(s, "status=138") {
		t.Errorf("task 2 exiting with 138 under srun:\n%s", s)
	}
	if s := section("wdir"); !strings.Contains(s, "0: /tmp\n") || !strings.Contains(s, "-wdir /nonexistent-gorun-wdir") || !strings.Contains(s, "status=1") {
		t.Errorf("-wdir under srun:\n%s", s)
	}
	if s := section("npernode"); !strings.Contains(s, "0: "+h1+"\n") || !strings.Contains(s, "1: "+h2+"\n") {
		t.Errorf("-N 1 under srun: want one rank on each node:\n%s", s)
	}
	if s := section("gomaxprocs"); !strings.Contains(s, "0: gomaxprocs=\n") {
		t.Errorf("under srun gorun set GOMAXPROCS from its own machine:\n%s", s)
	}
	if s := section("output"); !strings.HasSuffix(s, "\ntask 1\n\n") {
		t.Errorf("--output-filename under srun:\n%s", s)
	}
}
