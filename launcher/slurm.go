package launcher

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"golang.org/x/sys/unix"
)

// useSrun decides whether ranks are placed by srun: inside a Slurm
// allocation (SLURM_JOB_ID set), with srun on PATH, when the user gave
// neither hosts nor a launch agent; UseSrun "yes" or "no" overrides.
// "yes" without an allocation or without srun is a usage error: gorun
// places ranks in an allocation it is given (its node list, its task
// count) and asks for none.
func useSrun(cfg Config) (bool, error) {
	switch cfg.UseSrun {
	case "no":
		return false, nil
	case "yes":
		var why []string
		if os.Getenv("SLURM_JOB_ID") == "" {
			why = append(why, "there is no Slurm allocation (SLURM_JOB_ID is unset; run gorun inside salloc or sbatch)")
		}
		if _, err := exec.LookPath("srun"); err != nil {
			why = append(why, "srun is not on PATH")
		}
		if len(why) > 0 {
			return false, fmt.Errorf("%w: --srun yes, but %s", ErrUsage, strings.Join(why, ", and "))
		}
		return true, nil
	}
	if os.Getenv("SLURM_JOB_ID") == "" || cfg.LaunchAgent != nil || len(cfg.Hosts) > 0 {
		return false, nil
	}
	_, err := exec.LookPath("srun")
	return err == nil, nil
}

// fitsAllocation checks -np against the Slurm allocation's task count,
// so that a job larger than its allocation fails with a clear error
// before srun is asked for a step it cannot have.
func fitsAllocation(np int) error {
	if n, name := allocationCount("SLURM_NTASKS", "SLURM_NPROCS"); n > 0 && np > n {
		return fmt.Errorf("%w: -np %d but the Slurm allocation has %d tasks (%s); ask for more (sbatch -n) or run fewer ranks", ErrUsage, np, n, name)
	}
	return nil
}

// allocationCount is the first of the Slurm variables names that holds a
// count, and its name; 0 when none does.
func allocationCount(names ...string) (int, string) {
	for _, name := range names {
		if v := os.Getenv(name); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n, name
			}
		}
	}
	return 0, ""
}

// defaultNP is -np for a job that gives none (nor hosts, nor --npernode):
// inside a Slurm allocation, as srun and mpirun do there, one rank per
// task of it (SLURM_NTASKS), or per node when it names no task count, as
// srun does; elsewhere -np is needed.
func defaultNP(cfg Config, srun bool) (Config, error) {
	if cfg.NP > 0 {
		return cfg, nil
	}
	if !srun {
		return cfg, fmt.Errorf("%w: -np is required without -H, --hostfile or a Slurm allocation", ErrUsage)
	}
	n, _ := allocationCount("SLURM_NTASKS", "SLURM_NPROCS")
	if n == 0 {
		n, _ = allocationCount("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
	}
	if n == 0 {
		return cfg, fmt.Errorf("%w: -np is required: the Slurm allocation's task count (SLURM_NTASKS) is not set", ErrUsage)
	}
	cfg.NP = n
	return cfg, nil
}

// srunTaskScript runs each task as sh -c SCRIPT sh DIR PROGRAM ARGS...: task
// 0 prints a step marker (marker.go) with the job step's id, for
// signalSrun; each task changes to DIR (-wdir; a wdir marker and status 1 when that fails:
// slurmstepd would fall back to /tmp), runs the program in the
// foreground, so that it keeps its stdin and signal dispositions, and
// prints an exit or signal marker (marker.go, runQuiet: exit(138) and
// SIGUSR1 told apart) with its rank and its node. srun only says that some
// task failed (its own status, 143 once --kill-on-bad-exit has stopped the
// rest); the marker says which, and how. What srun's step does to the
// wrapper itself is not known so: a task whose wrapper Slurm kills with it
// (SIGKILL at --kill-on-bad-exit or at the step's end, a node that fails)
// reports nothing, and then gorun has only srun's status and the first
// task that did report.
const srunTaskScript = `trap : TERM USR1 USR2; if [ "$SLURM_PROCID" = 0 ]; then printf '\036gorun:step %s.%s\n' "$SLURM_JOB_ID" "$SLURM_STEP_ID" >&2; fi; ` +
	`if [ -n "$1" ]; then cd "$1" 2>/dev/null || { printf '\036gorun:wdir %s %s\n' "$SLURM_PROCID" "$SLURMD_NODENAME" >&2; exit 1; }; fi; shift; ` +
	runQuiet + `; printf '\036gorun:%s %s %s %s\n' "$k" "$n" "$SLURM_PROCID" "$SLURMD_NODENAME" >&2; exit "$s"`

// srunArgv is the srun command for the job. srun places the ranks and
// sets SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, which comm.Init reads;
// --kill-on-bad-exit makes Slurm stop the job when a rank fails,
// --ntasks-per-node carries out --npernode, --cpu-bind --bind-to, and
// --label prefixes each output line with "RANK: ". Each task runs in
// srunTaskScript.
func srunArgv(cfg Config, prog string) []string {
	a := []string{"srun", "-n", strconv.Itoa(cfg.NP), "--kill-on-bad-exit=1"}
	switch cfg.Bind { // Slurm binds its tasks itself
	case "core":
		a = append(a, "--cpu-bind=cores")
	case "numa":
		a = append(a, "--cpu-bind=ldoms")
	}
	if cfg.NPerNode > 0 {
		a = append(a, "--ntasks-per-node="+strconv.Itoa(cfg.NPerNode))
	}
	if !cfg.NoTag {
		a = append(a, "--label")
	}
	a = append(a, "sh", "-c", srunTaskScript, "sh", cfg.WorkDir, prog)
	return append(a, cfg.Args...)
}

// checkSrun refuses what srun placement cannot do.
func checkSrun(cfg Config) error {
	if cfg.OutputDir != "" && cfg.NoTag {
		return fmt.Errorf("%w: --output-filename under srun needs srun's labels to tell the ranks apart; drop --tag-output=false or use --srun no", ErrUsage)
	}
	return nil
}

// srunProc is srun's process for the whole job. Its environment has no
// GOMAXPROCS of gorun's choosing (localEnv counts this machine's CPUs;
// the tasks run on other nodes): comm.Init gives each rank its share of
// its own node's CPUs.
func srunProc(cfg Config, prog string, j *jobEnv, con *console) (*proc, error) {
	a := srunArgv(cfg, prog)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Env = rankEnv(j.sharedVars(), false)
	cmd.Stdin = cfg.Stdin
	st := &srunTasks{dir: cfg.WorkDir}
	if cfg.OutputDir != "" {
		for r := 0; r < cfg.NP; r++ {
			fs, err := rankLogs(cfg.OutputDir, r, false)
			if err != nil {
				st.close()
				return nil, err
			}
			st.logs = append(st.logs, fs)
		}
	}
	p := &proc{rank: -1, cmd: cmd, tasks: st}
	p.stdout = newRankWriter(con, cfg.Stdout, -1, false)
	p.stderr = newRankWriter(con, cfg.Stderr, -1, false)
	p.stdout.tap, p.stderr.tap = st.tap(0), st.tap(1)
	return p, nil
}

// slurmSeed is the seed address: the allocation's first node, where srun's
// block distribution puts rank 0.
func slurmSeed(port int) (string, error) {
	host := firstSlurmHost()
	if host == "" {
		return "", fmt.Errorf("%w: SLURM_JOB_NODELIST is empty", ErrLaunch)
	}
	if port == 0 {
		port = randomPort()
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

func firstSlurmHost() string { return jobenv.FirstHost(jobenv.SlurmNodeList(os.Getenv)) }

// FirstHost returns the first host of a Slurm host list (jobenv.FirstHost).
func FirstHost(list string) string { return jobenv.FirstHost(list) }

// srun's signals: SIGINT alone only makes srun print its tasks' state,
// and two within a second abort the step (its tasks get SIGKILL through
// slurmctld); SIGTERM aborts it too. SIGKILL to srun itself would leave
// its step running (the reviewer's 4 ranks outlived gorun). SIGTERM for
// the tasks alone goes through scancel.
const (
	srunIntGap    = 200 * time.Millisecond // between the two SIGINTs: one pending signal absorbs a second
	srunAbortWait = 10 * time.Second       // for srun to end its step and exit before gorun kills it
	scancelWait   = 10 * time.Second       // for scancel
)

// signalSrun stops p's tasks as sig would stop a rank, or passes sig on.
// SIGINT and SIGTERM become "scancel --signal=TERM STEP" once task 0 has
// named the step, else SIGTERM to srun (its abort); SIGUSR1 and SIGUSR2
// become "scancel --signal=USR1 STEP" (USR2), else go to srun, which
// forwards them; SIGKILL becomes the double SIGINT (srun's abort) then,
// should srun not be gone srunAbortWait later, SIGKILL. Other signals go
// to srun. srun is never signalled once reaped (os.Process holds a pidfd).
func signalSrun(p *proc, sig syscall.Signal) {
	srun := p.cmd.Process
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM:
		scancel(p.tasks.jobStep(), syscall.SIGTERM, srun)
	case syscall.SIGUSR1, syscall.SIGUSR2:
		scancel(p.tasks.jobStep(), sig, srun)
	case syscall.SIGKILL:
		srun.Signal(syscall.SIGINT)
		time.AfterFunc(srunIntGap, func() {
			if srun.Signal(syscall.SIGINT) == nil {
				time.AfterFunc(srunAbortWait, func() { srun.Kill() })
			}
		})
	default:
		srun.Signal(sig)
	}
}

// scancel sends sig to every task of the job step, in the background; with
// no step yet, or when scancel fails, srun gets sig instead.
func scancel(step string, sig syscall.Signal, srun *os.Process) {
	if step == "" {
		srun.Signal(sig)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), scancelWait)
		defer cancel()
		cmd := exec.CommandContext(ctx, "scancel", "--signal="+strings.TrimPrefix(unix.SignalName(sig), "SIG"), step)
		cmd.Env = localEnv(nil)
		if err := cmd.Run(); err != nil {
			srun.Signal(sig)
		}
	}()
}

// perNode applies --npernode to a job without hosts: this machine gets
// NPerNode slots, or srun places NPerNode tasks per node; -np defaults to
// all of them.
func perNode(cfg Config, srun bool) (Config, error) {
	if cfg.NPerNode <= 0 || len(cfg.Hosts) > 0 || cfg.NNodes > 0 {
		return cfg, nil
	}
	if !srun {
		cfg.Hosts = []Host{{Name: "", Slots: cfg.NPerNode}}
		if cfg.NP == 0 {
			cfg.NP = cfg.NPerNode
		}
		return cfg, nil
	}
	if cfg.NP == 0 {
		nodes, _ := allocationCount("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
		if nodes == 0 {
			return cfg, fmt.Errorf("%w: -np is required: the Slurm allocation's node count (SLURM_JOB_NUM_NODES) is not set", ErrUsage)
		}
		cfg.NP = cfg.NPerNode * nodes
	}
	return cfg, nil
}
