package launcher

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// useSrun decides whether ranks are placed by srun: inside a Slurm
// allocation (SLURM_JOB_ID set), with srun on PATH, when the user gave
// neither hosts nor a launch agent; UseSrun "yes" or "no" overrides.
func useSrun(cfg Config) (bool, error) {
	switch cfg.UseSrun {
	case "no":
		return false, nil
	case "yes":
		if _, err := exec.LookPath("srun"); err != nil {
			return false, fmt.Errorf("%w: srun: %v", ErrLaunch, err)
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
	for _, name := range []string{"SLURM_NTASKS", "SLURM_NPROCS"} {
		if v := os.Getenv(name); v != "" {
			if n, err := strconv.Atoi(v); err == nil && np > n {
				return fmt.Errorf("%w: -np %d but the Slurm allocation has %d tasks (%s); ask for more (sbatch -n) or run fewer ranks", ErrUsage, np, n, name)
			}
			return nil
		}
	}
	return nil
}

// srunArgv is the srun command for the job. srun places the ranks and
// sets SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS, which comm.Init reads;
// --kill-on-bad-exit makes Slurm stop the job when a rank fails,
// --cpu-bind carries out --bind-to, and --label prefixes each output line
// with "RANK: ".
func srunArgv(cfg Config, prog string) []string {
	a := []string{"srun", "-n", strconv.Itoa(cfg.NP), "--kill-on-bad-exit=1"}
	switch cfg.Bind { // Slurm binds its tasks itself
	case "core":
		a = append(a, "--cpu-bind=cores")
	case "numa":
		a = append(a, "--cpu-bind=ldoms")
	}
	if !cfg.NoTag {
		a = append(a, "--label")
	}
	return append(append(a, prog), cfg.Args...)
}

func srunProc(cfg Config, prog string, j *jobEnv, con *console) *proc {
	a := srunArgv(cfg, prog)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Env = localEnv(j.sharedVars())
	cmd.Stdin = cfg.Stdin
	p := &proc{rank: -1, cmd: cmd}
	p.stdout = newRankWriter(con, cfg.Stdout, -1, false)
	p.stderr = newRankWriter(con, cfg.Stderr, -1, false)
	return p
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
