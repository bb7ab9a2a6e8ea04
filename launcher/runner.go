package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// proc is one started command: a rank, or srun standing for all of them.
type proc struct {
	rank   int    // -1 for srun
	host   string // "" for this machine
	cmd    *exec.Cmd
	stdout *rankWriter
	stderr *rankWriter
	cpus   []int // --bind-to CPU set of a local rank, or nil
	done   bool
	how    string        // how the process ended, once done: "exited with status 1"
	ended  chan struct{} // closed when this start's process has been waited for
	// started is when this start's process was started: job control
	// reports older than it are a previous start's (silent.go).
	started time.Time

	restarts int // times restarted (--max-restarts, restart.go)
	// remake is the rank's command for a start that joins the running
	// job, GORUN_RESTART=n (rankCmd); nil under srun.
	remake func(restart int) *exec.Cmd

	tasks  *srunTasks  // srun's tasks (marker.go); nil for a rank
	remote *remoteRank // a rank started through the launch agent, else nil
	// connecting: its ssh connection is being set up, and counts against
	// its host's sshStartsPerHost (sshstart.go).
	connecting bool
}

type exit struct {
	p   *proc
	err error
}

// runner owns the processes of one job: it starts them, waits for them,
// forwards signals, and stops them all when one fails. Only run's
// goroutine touches its fields.
type runner struct {
	cfg   Config
	con   *console
	procs []*proc
	mon   *monitor
	// ctl is told of every rank's end: the job control server, which
	// passes on those of ranks that never joined to the ranks still
	// forming the world (jobctl's exits.go). nil: nobody to tell.
	ctl interface {
		Exited(rank int, how string) bool
	}

	running  int
	stopping bool
	// signalling counts the signals to remote ranks in flight (r.kill):
	// run returns once they are done, so that gorun does not return while
	// a remote rank it has SIGKILLed still runs (its local agent ends
	// with the wrapper, which dies with the rank's process group).
	signalling sync.WaitGroup
	stopSig    syscall.Signal // the signal stop sent first
	killAt     <-chan time.Time
	first      error // what ends the job with a non-zero status
	exits      chan exit

	// Failures waiting for the rank they blame to exit (culprit.go), and
	// the end of that wait.
	held    []*RankError
	graceAt <-chan time.Time

	// --add-ranks (addranks.go): requests, and how to make rank r's
	// process; newRank is nil when the job cannot add ranks.
	adds    chan addRequest
	newRank func(rank int) *proc

	ssh *sshStarts // ranks started over ssh a few at a time; nil: all at once
}

// addRequest is one --add-ranks request (addranks.go), answered on reply.
type addRequest struct {
	n     int
	reply chan addReply
}

type addReply struct {
	ranks []int
	err   error
}

// tick is how often the live view and the stall checker look at the job.
const tick = 250 * time.Millisecond

func (r *runner) run(ctx context.Context) error {
	exits := make(chan exit, len(r.procs))
	r.exits = exits
	if isShellAgent(agentOf(r.cfg)) {
		r.ssh = newSSHStarts(len(r.procs))
	}
	for _, p := range r.procs {
		if r.later(p) {
			continue
		}
		if err := r.start(p, exits); err != nil {
			r.startFailed(p, err)
			break
		}
	}
	var deadline <-chan time.Time
	if r.cfg.Timeout > 0 {
		t := time.NewTimer(r.cfg.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	ctxDone := ctx.Done()
	for r.running > 0 {
		select {
		case e := <-exits:
			r.exited(e)
		case <-deadline:
			deadline = nil
			r.fail(&JobError{Err: ErrTimeout, Detail: " after " + r.cfg.Timeout.String(), Status: 124})
		case <-ctxDone:
			ctxDone = nil
			r.fail(&JobError{Err: ErrInterrupted, Detail: ": " + context.Cause(ctx).Error(), Status: 1})
		case sig := <-r.cfg.Signals:
			s, _ := sig.(syscall.Signal)
			if s == 0 {
				s = syscall.SIGTERM
			}
			if !stops(s) {
				r.kill(s) // SIGUSR1, SIGUSR2: passed on, the job goes on
				continue
			}
			if r.stopping {
				r.con.message(fmt.Sprintf("gorun: %v again: killing %d ranks", s, r.ranks()))
				r.kill(syscall.SIGKILL)
				continue
			}
			je := &JobError{Err: ErrInterrupted, Detail: " by " + s.String(), Status: 128 + int(s)}
			if r.first == nil {
				r.first = je
			}
			fwd := forwarded(s)
			r.con.message(fmt.Sprintf("gorun: %v; forwarding %v to %d ranks", je, fwd, r.ranks()))
			r.stop(fwd)
		case <-r.graceAt:
			r.settle(true)
		case <-r.killAt:
			r.killAt = nil
			r.con.message(fmt.Sprintf("gorun: %d ranks still running %v after %s: killing them", r.ranks(), r.cfg.KillGrace, unix.SignalName(r.stopSig)))
			r.kill(syscall.SIGKILL)
		case now := <-ticker.C:
			r.stopSilent(r.mon.tick(now), now)
		case req := <-r.adds:
			ranks, err := r.addRanks(req.n)
			req.reply <- addReply{ranks, err}
		case p := <-r.ssh.connectedChan():
			r.connectedOrGone(p)
		}
	}
	r.mon.finish()
	r.signalling.Wait()
	return r.first
}

// start launches p and reports its exit on exits.
func (r *runner) start(p *proc, exits chan<- exit) error {
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	var logs []*os.File
	if r.cfg.OutputDir != "" && p.rank >= 0 {
		var err error
		if logs, err = rankLogs(r.cfg.OutputDir, p.rank, p.restarts > 0); err != nil {
			return err
		}
		// Through the rank's writers, which keep a remote rank's
		// markers out of its files as out of the console.
		p.stdout.file, p.stderr.file = logs[0], logs[1]
	}
	p.ended = make(chan struct{})
	ended := p.ended
	if p.remote != nil {
		// A restart's markers are new. A signal held for the pid marker
		// goes to the process group it names, through a second agent
		// command, as kill sends it.
		agent, host, grace := agentOf(r.cfg), p.host, r.cfg.KillGrace
		*p.remote = remoteRank{dir: p.remote.dir, send: func(pgid int, sig syscall.Signal) {
			go signalRemote(agent, host, pgid, p.cmd.Process, ended, sig, grace)
		}}
		if p.connecting {
			c := r.ssh.connected
			p.remote.connected = func() { c <- p } // once, into room for every proc
		}
	}
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.WaitDelay = waitDelay
	var stdin *os.File
	if in := p.cmd.Stdin; in != nil {
		if _, isFile := in.(*os.File); !isFile {
			// A pipe gorun fills itself, so Wait does not wait for a
			// reader blocked on gorun's own stdin.
			pr, pw, err := os.Pipe()
			if err != nil {
				return err
			}
			p.cmd.Stdin, stdin = pr, pr
			go func() {
				io.Copy(pw, in)
				pw.Close()
			}()
		}
	}
	var err error
	if p.cpus != nil {
		err = startBound(p.cmd, p.cpus)
	} else {
		err = p.cmd.Start()
	}
	if stdin != nil {
		stdin.Close() // the child has its copy
	}
	if err != nil {
		return err
	}
	p.started = time.Now()
	r.running++
	go func() {
		endGroup(p.cmd.Process)
		err := p.cmd.Wait()
		close(ended)
		p.stdout.Flush()
		p.stderr.Flush()
		for _, f := range logs {
			f.Close()
		}
		if p.tasks != nil {
			p.tasks.close()
		}
		exits <- exit{p, err}
	}()
	return nil
}

// exited handles the end of one process.
func (r *runner) exited(e exit) {
	r.running--
	e.p.done = true
	r.connectedOrGone(e.p)
	re := rankFailure(e.p, e.err)
	e.p.how = "exited with status 0"
	if re != nil {
		e.p.how = re.how()
	}
	if r.ctl != nil && e.p.rank >= 0 && !r.stopping {
		how := "exit status 0"
		if e.err != nil {
			how = e.err.Error()
		}
		r.ctl.Exited(e.p.rank, how)
	}
	if r.stopping {
		return // a rank gorun itself is stopping
	}
	if re == nil {
		if len(r.held) > 0 {
			r.settle(false) // the rank the held failures blame may be this one
		}
		return
	}
	if r.cfg.Elastic && r.restart(e.p, re) {
		return
	}
	if r.cfg.Elastic && r.running < r.cfg.MinNP {
		r.fail(fmt.Errorf("%w; %d ranks left, fewer than --min-np %d", re, r.running, r.cfg.MinNP))
		return
	}
	if r.cfg.Elastic {
		r.con.message("gorun: " + re.Error() + "; the job goes on (--elastic)")
		if r.first == nil {
			r.first = re
		}
		return
	}
	r.held = append(r.held, re)
	r.settle(false)
}

// fail records why the job ends and stops the remaining ranks.
func (r *runner) fail(err error) {
	if r.first == nil {
		r.first = err
	}
	msg := "gorun: " + err.Error()
	var re *RankError
	switch {
	case r.running > 0 && errors.As(err, &re):
		msg += fmt.Sprintf("; stopping the other %d", r.running)
	case r.running > 0:
		msg += fmt.Sprintf("; stopping %d ranks", r.running)
	}
	r.con.message(msg)
	r.stop(syscall.SIGTERM)
}

// stop sends sig to every running process and arms the SIGKILL timer.
func (r *runner) stop(sig syscall.Signal) {
	if !r.stopping {
		r.stopping, r.stopSig = true, sig
		r.killAt = time.After(r.cfg.KillGrace)
		r.dropWaiting()
	}
	r.kill(sig)
}

func (r *runner) kill(sig syscall.Signal) {
	for _, p := range r.procs {
		if p.done || p.cmd.Process == nil {
			continue
		}
		if p.tasks != nil {
			signalSrun(p, sig)
			continue
		}
		if p.remote != nil {
			pgid, held := p.remote.pidOrHold(sig)
			if pgid > 0 {
				agent, local, ended, grace := agentOf(r.cfg), p.cmd.Process, p.ended, r.cfg.KillGrace
				r.signalling.Go(func() { signalRemote(agent, p.host, pgid, local, ended, sig, grace) })
				continue
			}
			if held {
				// No process group reported yet: SIGUSR1 or SIGUSR2 goes
				// to it once the pid marker names it (an agent that never
				// gives the script a group of its own never does). The
				// local agent would die of it, and the rank with it; it
				// stands for the rank only for signals that end it.
				continue
			}
		}
		if err := signalGroup(p.cmd.Process, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.cmd.Process.Signal(sig)
		}
	}
}

// stops reports whether gorun stopping the job sends sig: SIGUSR1 and
// SIGUSR2 are only passed on to the ranks, as mpirun does.
func stops(sig syscall.Signal) bool {
	return sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2
}

// forwarded is the signal the ranks get when sig stops gorun: SIGINT and
// SIGTERM themselves; SIGHUP (gorun's terminal went away, not theirs) and
// SIGPIPE (its output's reader did) SIGTERM, as mpirun does for SIGHUP,
// so that a rank's SIGTERM handler runs.
func forwarded(sig syscall.Signal) syscall.Signal {
	if sig == syscall.SIGHUP || sig == syscall.SIGPIPE {
		return syscall.SIGTERM
	}
	return sig
}

// endedRanks tells how each rank whose process ended (and was not
// restarted) did, for the stall report; nil under srun, whose tasks' ends
// gorun does not see one by one.
func (r *runner) endedRanks() map[int]string {
	m := map[int]string{}
	for _, p := range r.procs {
		switch {
		case p.tasks != nil:
			return nil
		case p.done && p.rank >= 0:
			m[p.rank] = p.how
		}
	}
	return m
}

// ranks is the number of ranks still running: srun stands for all of its
// tasks.
func (r *runner) ranks() int {
	n := 0
	for _, p := range r.procs {
		switch {
		case p.done, p.cmd.Process == nil: // ended, or not started yet
		case p.tasks != nil:
			n += r.cfg.NP
		default:
			n++
		}
	}
	return n
}

// rankLogs creates dir/rank.N/stdout and stderr (--output-filename, laid
// out as Open MPI's minus its job-number level); a restarted rank
// (--max-restarts) appends to them, after the output of the start that
// failed.
func rankLogs(dir string, rank int, restarted bool) ([]*os.File, error) {
	d := filepath.Join(dir, fmt.Sprintf("rank.%d", rank))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --output-filename: %v", ErrLaunch, err)
	}
	var fs []*os.File
	for _, name := range []string{"stdout", "stderr"} {
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if restarted {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		}
		f, err := os.OpenFile(filepath.Join(d, name), flags, 0o666)
		if err != nil {
			for _, g := range fs {
				g.Close()
			}
			return nil, fmt.Errorf("%w: --output-filename: %v", ErrLaunch, err)
		}
		fs = append(fs, f)
	}
	return fs, nil
}
