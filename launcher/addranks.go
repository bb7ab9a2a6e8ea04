//go:build linux

package launcher

// Adding ranks to a running job: `gorun --add-ranks N --job ID` asks the
// gorun that runs job ID (started with --elastic --max-np M) to start N more
// ranks on this machine, as torchrun's --nnodes=MIN:MAX admits a new node
// and Horovod Elastic's driver adds workers. The new ranks get the job's
// environment with GORUN_RANK from NP up (the lowest not yet used), join
// through comm.Init, and the running ranks admit them with Comm.Grow at
// their next control point (Comm.Joiners). gorun then owns them as it owns
// the others: their output is tagged, --max-restarts applies, they are
// stopped with the job.
//
// The request travels over a Linux abstract unix socket named after the
// job, "@gorun-ctl-ID" (no file to leave behind); gorun serves it only to
// a client of its own uid (SO_PEERCRED), like the shm transport. Protocol:
// one line "add N\n"; the answer is one line, "ok R1 R2 ...\n" with the
// ranks started, or "error TEXT\n".
//
// Ownership: serveAddRanks's goroutines only pass requests; the runner's
// goroutine starts the processes (addRanks), as it does every other.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// canAddRanks says whether a job can take ranks added later: elastic,
// --max-np above -np, every rank on this machine (the new ranks start
// here), not under srun or --nnodes.
func canAddRanks(cfg Config, srun bool, slots []Slot) bool {
	if !cfg.Elastic || cfg.MaxNP <= cfg.NP || srun || cfg.NNodes > 0 || len(slots) == 0 {
		return false
	}
	for _, s := range slots {
		if !isLocalHost(s.Host) {
			return false
		}
	}
	return true
}

// offerAddRanks serves --add-ranks for job j until the returned stop is
// called; newRank makes rank r's process.
func (r *runner) offerAddRanks(ctx context.Context, j *jobEnv, newRank func(rank int) *proc) (stop func()) {
	r.adds, r.newRank = make(chan addRequest), newRank
	stop, err := serveAddRanks(ctx, j.jobID, r.adds)
	if err != nil {
		r.con.message(fmt.Sprintf("gorun: --max-np: cannot serve --add-ranks: %v", err))
		r.newRank = nil
		return func() {}
	}
	r.con.message(fmt.Sprintf("gorun: job %s may grow to %d ranks: gorun --add-ranks N --job %s", j.jobID, r.cfg.MaxNP, j.jobID))
	return stop
}

// controlSocket is the abstract socket of job id's add-ranks service.
func controlSocket(jobID string) string { return "@gorun-ctl-" + jobID }

// addRanksTimeout bounds one client's request on the server side.
const addRanksTimeout = 10 * time.Second

// serveAddRanks listens on job id's control socket until ctx ends and
// passes each request to reqs. It returns once listening.
func serveAddRanks(ctx context.Context, jobID string, reqs chan<- addRequest) (stop func(), err error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: controlSocket(jobID), Net: "unix"})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		defer close(done)
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			go serveAddRequest(ctx, c, reqs)
		}
	}()
	return func() { cancel(); <-done }, nil
}

func serveAddRequest(ctx context.Context, c *net.UnixConn, reqs chan<- addRequest) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(addRanksTimeout))
	answer := func(format string, args ...any) { fmt.Fprintf(c, format+"\n", args...) }
	if uid, err := peerUID(c); err != nil || uid != os.Getuid() {
		answer("error refused: not the job's user")
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	n, err := strconv.Atoi(arg)
	if verb != "add" || err != nil || n < 1 {
		answer("error bad request %q: want \"add N\" with N ≥ 1", strings.TrimSpace(line))
		return
	}
	req := addRequest{n: n, reply: make(chan addReply, 1)}
	select {
	case reqs <- req:
	case <-ctx.Done():
		answer("error the job is ending")
		return
	}
	select {
	case r := <-req.reply:
		if r.err != nil {
			answer("error %v", r.err)
			return
		}
		s := make([]string, len(r.ranks))
		for i, rk := range r.ranks {
			s[i] = strconv.Itoa(rk)
		}
		answer("ok %s", strings.Join(s, " "))
	case <-ctx.Done():
		answer("error the job is ending")
	}
}

func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid, cerr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr == nil {
			uid = int(cred.Uid)
		}
	}); err != nil {
		return -1, err
	}
	return uid, cerr
}

// addRanks starts n more ranks (runner goroutine): GORUN_RANK from the
// lowest unused one, within --max-np.
func (r *runner) addRanks(n int) ([]int, error) {
	if r.stopping {
		return nil, errors.New("the job is ending")
	}
	if r.newRank == nil {
		return nil, errors.New("this job cannot add ranks (it needs --elastic and --max-np above -np, ranks on this machine)")
	}
	used := map[int]bool{}
	for _, p := range r.procs {
		used[p.rank] = true
	}
	var free []int
	for rk := r.cfg.NP; rk < r.cfg.MaxNP && len(free) < n; rk++ {
		if !used[rk] {
			free = append(free, rk)
		}
	}
	if len(free) < n {
		return nil, fmt.Errorf("only %d of %d ranks fit under --max-np %d", len(free), n, r.cfg.MaxNP)
	}
	for i, rk := range free {
		p := r.newRank(rk)
		if err := r.start(p, r.exits); err != nil {
			return free[:i], fmt.Errorf("starting rank %d: %v", rk, err)
		}
		r.procs = append(r.procs, p)
	}
	r.con.message(fmt.Sprintf("gorun: added rank(s) %s (--add-ranks); they join at the running ranks' next Grow", rankListString(free)))
	return free, nil
}

// rankListString is ranks as "4, 5, 6".
func rankListString(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

// AddRanks asks the gorun running job jobID, on this machine and of this
// user, to start n more ranks (gorun --add-ranks); it returns the ranks
// started.
func AddRanks(ctx context.Context, jobID string, n int) ([]int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", controlSocket(jobID))
	if err != nil {
		return nil, fmt.Errorf("no running job %q on this machine that can add ranks (started by gorun --elastic --max-np, as this user?): %v", jobID, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := fmt.Fprintf(c, "add %d\n", n); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("job %q: no answer: %v", jobID, err)
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return nil, fmt.Errorf("job %q: %s", jobID, msg)
	}
	rest, ok := strings.CutPrefix(line, "ok")
	if !ok {
		return nil, fmt.Errorf("job %q: unexpected answer %q", jobID, line)
	}
	var ranks []int
	for _, f := range strings.Fields(rest) {
		rk, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("job %q: unexpected answer %q", jobID, line)
		}
		ranks = append(ranks, rk)
	}
	return ranks, nil
}
