package launcher

import (
	"fmt"
	"syscall"
)

// Ranks over ssh start a few at a time per host. Every rank is an ssh
// connection of its own, and sshd drops connections that are not yet
// authenticated beyond MaxStartups (default 10:30:100: from the 11th on,
// 30% of new ones, rising to all at 100): 32 ranks on one host started
// at once failed on every try against a stock sshd
// ("kex_exchange_identification: Connection closed by remote host", ssh's
// 255). So the runner starts at most sshStartsPerHost ranks of a host
// whose session has not yet reported its process group (the pid marker,
// marker.go), and the next as one does or exits. Other agents make no
// sshd connection, and their ranks all start at once.

// sshStartsPerHost stays under sshd's default MaxStartups of 10, with room
// for others' logins.
const sshStartsPerHost = 8

// sshStarts is the runner's (run's goroutine's) but for connected, which
// the ranks' stderr copiers send on.
type sshStarts struct {
	connected chan *proc         // a rank's pid marker came; room for every proc's one send
	starting  map[string]int     // ranks per host being connected
	waiting   map[string][]*proc // ranks per host not started yet, in rank order
}

func newSSHStarts(procs int) *sshStarts {
	return &sshStarts{connected: make(chan *proc, procs), starting: map[string]int{}, waiting: map[string][]*proc{}}
}

// connectedChan is nil (never ready) without throttling.
func (s *sshStarts) connectedChan() <-chan *proc {
	if s == nil {
		return nil
	}
	return s.connected
}

// later reports whether p waits for its host's connections in setup to
// drop under sshStartsPerHost; if not, p counts against them from now.
func (r *runner) later(p *proc) bool {
	if r.ssh == nil || p.remote == nil {
		return false
	}
	if r.ssh.starting[p.host] >= sshStartsPerHost {
		r.ssh.waiting[p.host] = append(r.ssh.waiting[p.host], p)
		return true
	}
	r.ssh.starting[p.host]++
	p.connecting = true
	return false
}

// connectedOrGone notes that p's connection is set up, or that p ended
// first, and starts the ranks of its host that wait for that.
func (r *runner) connectedOrGone(p *proc) {
	if !p.connecting {
		return
	}
	p.connecting = false
	r.ssh.starting[p.host]--
	for !r.stopping && len(r.ssh.waiting[p.host]) > 0 && r.ssh.starting[p.host] < sshStartsPerHost {
		next := r.ssh.waiting[p.host][0]
		r.ssh.waiting[p.host] = r.ssh.waiting[p.host][1:]
		r.later(next)
		if err := r.start(next, r.exits); err != nil {
			next.connecting = false
			r.ssh.starting[next.host]--
			r.startFailed(next, err)
			return
		}
	}
}

// dropWaiting gives up the ranks not started yet: the job stops.
func (r *runner) dropWaiting() {
	if r.ssh == nil {
		return
	}
	for host, ps := range r.ssh.waiting {
		for _, p := range ps {
			p.done = true
		}
		delete(r.ssh.waiting, host)
	}
}

// startFailed ends the job because p could not be started.
func (r *runner) startFailed(p *proc, err error) {
	p.done = true
	re := &RankError{Rank: p.rank, Host: p.host, ExitCode: -1, Err: fmt.Errorf("%w: %v", ErrLaunch, err)}
	if r.first == nil {
		r.first = re
	}
	r.con.message("gorun: " + re.Error())
	r.stop(syscall.SIGTERM)
}
