package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// waitDelay bounds how long gorun waits for a rank's output after it exits
// (a grandchild may hold the pipes open).
const waitDelay = 2 * time.Second

// Run starts the job described by cfg, waits for it and returns nil when
// every rank exited with status 0. Otherwise the error names the first
// rank that failed (a *RankError) or why the job was stopped (a
// *JobError); ExitStatus maps it to gorun's exit status. Cancelling ctx
// stops the ranks.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	con := &console{stdout: cfg.Stdout, stderr: cfg.Stderr, tty: cfg.Terminal}
	ctx, w := watchStart(ctx, cfg.Signals)
	defer w.cancel(nil)
	return w.interrupted(launch(ctx, cfg, con, w), con)
}

// launch is Run after the defaults: it prepares the job, and once w hands
// the signals over, starts the ranks and waits for them.
func launch(ctx context.Context, cfg Config, con *console, w *startWatch) error {
	var err error
	var seedHost string
	var seedPort int
	if cfg.NNodes > 0 {
		if seedHost, seedPort, err = checkNodes(cfg); err != nil {
			return err
		}
		cfg.UseSrun = "no"
	}
	srun, err := useSrun(cfg)
	if err != nil {
		return err
	}
	if cfg, err = perNode(cfg, srun); err != nil {
		return err
	}
	if cfg, err = defaultNP(cfg, srun); err != nil {
		return err
	}
	// Ranks beyond the slots: up to max_slots, or with --oversubscribe
	// (which --npernode overrides: it caps every host).
	if cfg.Hosts, err = fitSlots(cfg.Hosts, cfg.NP, cfg.Oversubscribe, cfg.NPerNode); err != nil {
		return err
	}
	if srun {
		if err := fitsAllocation(cfg.NP); err != nil {
			return err
		}
		if err := checkSrun(cfg); err != nil {
			return err
		}
	}
	var slots []Slot
	remoteHost := ""
	if cfg.NNodes > 0 {
		slots = nodeSlots(cfg)
	} else if !srun {
		if slots, err = PlaceBy(cfg.Hosts, cfg.NP, cfg.MapBy); err != nil {
			return err
		}
		for _, s := range slots {
			if !isLocalHost(s.Host) {
				remoteHost = s.Host
				break
			}
		}
	}
	if err := checkWorkDir(cfg.WorkDir, slots); err != nil {
		return err
	}
	extra, err := exportVars(cfg.Export, settingsOf(cfg))
	if err != nil {
		return err
	}

	obs, err := startObs(cfg, srun || remoteHost != "")
	if err != nil {
		return err
	}
	defer obs.cleanup()
	extra = append(extra, obs.vars()...)

	apps := cfg.Apps
	if len(apps) == 0 {
		apps = []App{{NP: cfg.NP, Program: cfg.Program, Args: cfg.Args}}
	} else if srun {
		return fmt.Errorf("%w: MPMD (':') is not supported with srun placement; use --srun no", ErrUsage)
	}
	progs := make([]string, len(apps))
	for i, app := range apps {
		var cleanup func()
		if progs[i], cleanup, err = resolveProgram(ctx, app.Program, cfg.WorkDir, srun || remoteHost != ""); err != nil {
			return err
		}
		defer cleanup()
	}
	prog := progs[0]

	// The address ranks use to reach this machine.
	here := "127.0.0.1"
	switch {
	case srun:
		if n := firstSlurmHost(); n != "" {
			here = addressToward(n)
		}
	case remoteHost != "":
		here = addressToward(remoteHost)
	}
	j := &jobEnv{size: cfg.NP, bind: cfg.Bind, elastic: cfg.Elastic, restarts: cfg.MaxRestarts, maxNP: cfg.MaxNP, extra: extra,
		jobID: "gorun-" + randomHex(8), token: randomHex(32)}
	if cfg.NNodes > 0 {
		j.size = cfg.NNodes * cfg.NP
		j.token, j.jobID = nodeJob(cfg.Seed)
		if err := meetNodes(ctx, cfg, seedHost, seedPort, j.token); err != nil {
			return err
		}
	}
	srv, err := jobctl.Listen(ctx, net.JoinHostPort(here, "0"), []byte(j.token))
	if err != nil {
		return fmt.Errorf("%w: job control: %v", ErrLaunch, err)
	}
	defer srv.Close()
	j.control = net.JoinHostPort(here, strconv.Itoa(srv.Addr().(*net.TCPAddr).Port))
	obs.serveMetrics(srv)

	var procs []*proc
	if srun {
		if j.seeds, err = slurmSeed(cfg.GossipPort); err != nil {
			return err
		}
		p, err := srunProc(cfg, prog, j, con)
		if err != nil {
			return err
		}
		procs = []*proc{p}
	} else {
		if cfg.NNodes > 0 {
			j.seeds = net.JoinHostPort(seedHost, strconv.Itoa(seedPort+1))
		} else if j.seeds, err = seedAddr(cfg.GossipPort, slots[0].Host, here, !isShellAgent(agentOf(cfg))); err != nil {
			return err
		}
		// Local ranks are bound here, at fork; remote ranks get
		// GORUN_BIND for comm.Init.
		sets, err := cpuSets(slots, cfg.Bind)
		if err != nil {
			con.message(fmt.Sprintf("gorun: --bind-to %s: %v; local ranks start unbound", cfg.Bind, err))
		}
		if w := bindWarning(cfg.Bind, sets); w != "" {
			con.message(w)
		}
		if cfg.ReportBindings {
			for _, line := range bindingReport(slots, sets, cfg.Bind) {
				con.message(line)
			}
		}
		for _, s := range slots {
			prog, args := appOf(apps, progs, s.Rank)
			p := rankProc(cfg, prog, args, j, s, con)
			p.cpus = sets[s.Rank]
			procs = append(procs, p)
		}
	}
	if je := w.handOff(); je != nil {
		return je
	}
	r := &runner{cfg: cfg, con: con, procs: procs, ctl: srv,
		mon: newMonitor(con, srv, cfg.NP, cfg.StatusDelay, cfg.StallTimeout)}
	r.mon.ended = r.endedRanks
	if canAddRanks(cfg, srun, slots) {
		stop := r.offerAddRanks(ctx, j, func(rank int) *proc {
			prog, args := appOf(apps, progs, cfg.NP-1)
			p := rankProc(cfg, prog, args, j, Slot{Rank: rank, Host: slots[0].Host, LocalRank: rank, LocalSize: rank + 1}, con)
			p.cmd = p.remake(0) // it joins a running job, as a restarted rank does
			return p
		})
		defer stop()
	}
	err = r.run(ctx)
	obs.finish(con)
	return err
}

// checkWorkDir checks -wdir where it is used here: on this machine, for
// the ranks that run on it (exec would otherwise blame the program, "fork/
// exec PROG: no such file or directory"). Remote hosts and srun's tasks
// check it in their wrapper (tokenScript, srunTaskScript). A relative
// program path is resolved against -wdir everywhere, as a shell would
// after cd.
func checkWorkDir(dir string, slots []Slot) error {
	if dir == "" || !slices.ContainsFunc(slots, func(s Slot) bool { return isLocalHost(s.Host) }) {
		return nil
	}
	fi, err := os.Stat(dir)
	var pe *os.PathError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%w: -wdir %s: %v", ErrLaunch, dir, pe.Err)
	case err != nil:
		return fmt.Errorf("%w: -wdir %s: %v", ErrLaunch, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: -wdir %s: not a directory", ErrLaunch, dir)
	}
	return nil
}

// rankProc prepares the command of one rank.
func rankProc(cfg Config, prog string, args []string, j *jobEnv, s Slot, con *console) *proc {
	p := &proc{rank: s.Rank, host: s.Host, cmd: rankCmd(cfg, prog, args, j, s, -1)}
	p.remake = func(restart int) *exec.Cmd { return rankCmd(cfg, prog, args, j, s, restart) }
	p.stdout = newRankWriter(con, cfg.Stdout, s.Rank, !cfg.NoTag)
	p.stderr = newRankWriter(con, cfg.Stderr, s.Rank, !cfg.NoTag)
	if !isLocalHost(s.Host) {
		p.remote = &remoteRank{dir: cfg.WorkDir}
		p.stderr.tap = p.remote.tap
	}
	return p
}

// rankCmd is the command of the rank in slot s. A rank that joins a
// running job (restart ≥ 0: restarted by --max-restarts, or added by
// --add-ranks with 0) gets GORUN_RESTART=restart and not rank 0's stdin,
// and a restarted one no GORUN_FAULT (faults are injected once: an added
// rank's first start keeps them); on a remote host this goes through the
// agent's command line and stdin as for the rank's first start, the job
// token's line included. Before 2026-11-29 a restart copied the first
// command and changed only the local process's environment: a remote rank
// came back with an empty token, the fault and no GORUN_RESTART, and
// never rejoined. (--add-ranks starts ranks on this machine only.)
func rankCmd(cfg Config, prog string, args []string, j *jobEnv, s Slot, restart int) *exec.Cmd {
	var stdin io.Reader
	if s.Rank == 0 && restart < 0 {
		stdin = cfg.Stdin
	}
	joining := func(vars []string) []string {
		if restart < 0 {
			return vars
		}
		out := make([]string, 0, len(vars)+1)
		for _, kv := range vars {
			if !(restart > 0 && strings.HasPrefix(kv, EnvFault+"=")) && !strings.HasPrefix(kv, EnvRestart+"=") {
				out = append(out, kv)
			}
		}
		return append(out, EnvRestart+"="+strconv.Itoa(restart))
	}
	if isLocalHost(s.Host) {
		cmd := exec.Command(prog, args...)
		cmd.Dir = cfg.WorkDir
		cmd.Env = joining(localEnv(j.rankVars(s)))
		cmd.Stdin = stdin
		return cmd
	}
	agent := cfg.LaunchAgent
	if agent == nil {
		agent = DefaultAgent
	}
	dir := cfg.WorkDir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	a := remoteArgv(agent, s.Host, dir, cfg.WorkDir != "", cfg.KillGrace, joining(j.remoteVars(s)), append([]string{prog}, args...))
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Env = localEnv(nil)
	// The token's line, then rank 0's input.
	in := []io.Reader{strings.NewReader(j.token + "\n")}
	if stdin != nil {
		in = append(in, stdin)
	}
	cmd.Stdin = io.MultiReader(in...)
	return cmd
}

// agentOf is the launch agent cfg uses for remote hosts.
func agentOf(cfg Config) []string {
	if cfg.LaunchAgent != nil {
		return cfg.LaunchAgent
	}
	return DefaultAgent
}

// seedAddr is the gossip seed: rank 0's host and a port for it. With
// mustResolve, a remote rank 0's host must resolve here: ssh reports a
// name it cannot resolve itself, at once, but another agent ("ip netns
// exec", "docker exec") takes names that are no host names.
func seedAddr(port int, host0, here string, mustResolve bool) (string, error) {
	if isLocalHost(host0) {
		if port == 0 {
			var err error
			if port, err = freePort(here); err != nil {
				return "", fmt.Errorf("%w: no free gossip port on %s: %v", ErrLaunch, here, err)
			}
		}
		return net.JoinHostPort(here, strconv.Itoa(port)), nil
	}
	if port == 0 {
		port = randomPort()
	}
	if _, h, ok := strings.Cut(host0, "@"); ok {
		host0 = h
	}
	if mustResolve {
		if err := resolves(host0); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(host0, strconv.Itoa(port)), nil
}

// resolveTimeout bounds the look-up of rank 0's host.
const resolveTimeout = 5 * time.Second

// resolves checks that the ranks can reach host by name: rank 0's host is
// the gossip seed every rank dials, so a name that does not resolve (a
// network namespace's name given to "ip netns exec", a typo) would
// otherwise leave every rank waiting for the world until its timeout.
func resolves(host string) error {
	if net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
		return fmt.Errorf("%w: host %q does not resolve (%v): rank 0's host is the gossip seed every rank dials, so list hosts by address or by a resolvable name (a network namespace's name given to \"ip netns exec\" is not one)", ErrLaunch, host, err)
	}
	return nil
}

// freePort finds a port free for both TCP and UDP on host (memberlist
// gossips over both) whose next port is free for TCP too: gorun's torch
// backend puts torch's store at MASTER_PORT = seed + 1. It draws below
// the kernel's ephemeral range (32768-60999 by default), where a port
// checked free is not handed to another process's outgoing connection
// before the job binds it (CI: torch's store failed with "address already
// in use" on a seed + 1 in that range), and falls back to a port the
// kernel picks.
func freePort(host string) (int, error) {
	free := func(port int) bool {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		defer ln.Close()
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		pc.Close()
		next, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port+1)))
		if err != nil {
			return false
		}
		next.Close()
		return true
	}
	for try := 0; try < 50; try++ {
		n, err := rand.Int(rand.Reader, big.NewInt(12000))
		if err != nil {
			break
		}
		if port := 20000 + int(n.Int64()); free(port) {
			return port, nil
		}
	}
	var err error
	for try := 0; try < 10; try++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port < 65535 && free(port) {
			return port, nil
		}
		err = fmt.Errorf("port %d (or %d) not free", port, port+1)
	}
	return 0, err
}

// randomPort picks a port in [20000, 32000) for a seed gorun cannot probe:
// below the kernel's ephemeral range (32768-60999 by default), as
// freePort draws, so that no outgoing connection on rank 0's host holds
// it. Drawn from [20000, 40000) before, rank 0 of a job on a namespace
// host failed to bind its seed, 36170, an ephemeral port, while other
// jobs' ranks ran on that host (CI on a fresh clone, 2026-12-03, comm's
// TestCluster/3x1, whose layouts run at once on the same hosts: "bind:
// address already in use"; the holder was not identified).
func randomPort() int {
	n, err := rand.Int(rand.Reader, big.NewInt(12000))
	if err != nil {
		return 29170
	}
	return 20000 + int(n.Int64())
}

// addressToward is this machine's address for ranks on host: the address
// of GORUN_SOCKET_IFNAME when set, else the source address of the route to
// host, else the first up non-loopback interface address (a host name
// that resolves to 127.0.1.1 must not leak to other machines), else the
// host name.
func addressToward(host string) string {
	if name := os.Getenv(EnvIfname); name != "" {
		if ip := interfaceIP(name); ip != "" {
			return ip
		}
	}
	if _, h, ok := strings.Cut(host, "@"); ok {
		host = h
	}
	if ip, err := outboundIP(host); err == nil {
		p := net.ParseIP(ip)
		if !p.IsUnspecified() && (!p.IsLoopback() || isLoopbackName(host)) {
			return ip
		}
	}
	if ip := interfaceIP(""); ip != "" {
		return ip
	}
	if name, err := os.Hostname(); err == nil {
		return name
	}
	return "127.0.0.1"
}

func isLoopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// interfaceIP is the first address of the named interface, or with name ""
// of the first up non-loopback interface; IPv4 first.
func interfaceIP(name string) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	var v6 string
	for _, ifc := range ifs {
		if name != "" && ifc.Name != name ||
			name == "" && (ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.IsLinkLocalUnicast() {
				continue
			}
			if n.IP.To4() != nil {
				return n.IP.String()
			}
			if v6 == "" {
				v6 = n.IP.String()
			}
		}
	}
	return v6
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // crypto/rand.Read never fails on Linux (Go ≥ 1.24)
	return hex.EncodeToString(b)
}

// rankFailure turns a Wait error into a *RankError, or nil for success.
// A wrapper's markers (marker.go) say more than srun's or ssh's status:
// which task failed, and whether the remote rank or the agent did.
func rankFailure(p *proc, err error) *RankError {
	if p.tasks != nil {
		if re := p.tasks.failure(); re != nil {
			return re
		}
	}
	if p.remote != nil {
		if re, ok := p.remote.failure(p); ok {
			return re
		}
	}
	ps := p.cmd.ProcessState
	if ps == nil {
		if err == nil {
			return nil
		}
		return &RankError{Rank: p.rank, Host: p.host, ExitCode: -1, Err: fmt.Errorf("%w: %v", ErrLaunch, err)}
	}
	if ps.Success() {
		return nil // including exec.ErrWaitDelay: a grandchild kept the output open
	}
	re := &RankError{Rank: p.rank, Host: p.host, ExitCode: ps.ExitCode(), Err: ErrRankFailed}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		re.Signal = ws.Signal()
	}
	return re
}

// resolveProgram returns the binary to run for prog: prog itself, or a
// Go package directory built once. With -wdir (wdir), a relative prog is
// the package under it, as the ranks, which start there, find a relative
// binary: mpirun resolves a relative program after changing to -wdir.
// Remote and srun ranks need the binary on a path they can see: the
// ranks' working directory (-wdir, else gorun's; usually shared on
// clusters); local ranks get it under /tmp. cleanup removes the build.
func resolveProgram(ctx context.Context, prog, wdir string, shared bool) (string, func(), error) {
	dir := prog
	if wdir != "" && !filepath.IsAbs(prog) {
		dir = filepath.Join(wdir, prog)
	}
	if !isGoPackage(prog, dir) {
		if dir != prog && isGoPackage(prog, prog) {
			// gorun built it from its own directory before 2026-12-01.
			return "", nil, fmt.Errorf("%w: %s is not under -wdir %s (a relative PROGRAM is resolved against -wdir), but a Go package here; give its absolute path", ErrLaunch, prog, wdir)
		}
		return prog, func() {}, nil
	}
	base := ""
	if shared {
		// Where the ranks start: -wdir, else gorun's directory. Before
		// 2026-12-01 it was gorun's directory even with -wdir, which
		// the hosts may not share. A -wdir missing here (an absolute
		// package, ranks on other hosts only) falls back to gorun's.
		base = "."
		if fi, err := os.Stat(wdir); wdir != "" && err == nil && fi.IsDir() {
			base = wdir
		}
	}
	tmp, err := os.MkdirTemp(base, ".gorun-build-")
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrLaunch, err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	bin, err := buildPackage(ctx, dir, tmp)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return bin, cleanup, nil
}

// appOf returns the program and arguments of the app that runs rank.
func appOf(apps []App, progs []string, rank int) (string, []string) {
	for i, a := range apps {
		if rank < a.NP {
			return progs[i], a.Args
		}
		rank -= a.NP
	}
	return progs[len(progs)-1], apps[len(apps)-1].Args
}
