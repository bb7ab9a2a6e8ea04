package comm

// The witness: frozen ranks seen by their neighbours on the same host.
//
// A rank stopped by SIGSTOP (or a debugger) keeps its connections and its
// gossip port open, so neither the transport nor a refused connection
// finds it; gossip suspicion would, but only after a timeout long enough
// not to kill a process that a loaded host starves of CPU (1.2-1.8 s).
// The kernel tells the two apart: a starved process is running or
// runnable, a frozen one is in the stopped state. Each rank watches the
// two ranks before it among the ranks of its host (so every rank has two
// witnesses), reading /proc/PID/stat every witnessEvery; a rank stopped
// for witnessStopped, or a zombie or a process that is gone for
// witnessEnded, is handed to the bootstrap (Node.Witnessed), which
// reports it here and on every other rank at once. Ranks on other hosts, and hosts with one rank, are left to
// gossip. Nothing here runs on the operation path.

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
)

const (
	witnessEvery   = 250 * time.Millisecond // how often a witness reads its ranks' state
	witnessStopped = 500 * time.Millisecond // how long a rank must stay stopped to be declared frozen
	// witnessEnded is how long a rank's process must have ended before it
	// is declared gone: one that closed its communicator first sent its
	// leave, which gossip brings by then, so it is reported as left, not
	// dead. Declared at once, the ranks still in their last collective
	// when it exited failed naming it (32 ranks on 2 hosts: gorun exited
	// 1 in 2 runs of 7). A killed rank is found sooner through its peers'
	// broken links (Suspect, the bootstrap's evidence).
	witnessEnded = 250 * time.Millisecond
	witnessFanIn = 2 // witnesses per rank
)

// procStat reads the state letter and start time (clock ticks after boot)
// of process pid from /proc/PID/stat.
func procStat(pid uint32) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ..."; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, errBadStat
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 { // f[0] is field 3 (state), f[19] field 22 (starttime)
		return 0, 0, errBadStat
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, errBadStat
	}
	return f[0][0], start, nil
}

var errBadStat = errors.New("unparsable /proc/PID/stat")

// selfStart is this process's start time for its endpoint, 0 if unknown.
func selfStart() uint64 {
	_, start, err := procStat(uint32(os.Getpid()))
	if err != nil {
		return 0
	}
	return start
}

// watchedRank is a rank a witness watches.
type watchedRank struct {
	rank         int
	pid          uint32
	start        uint64
	stoppedSince time.Time // when it was first seen stopped; zero when running
	endedSince   time.Time // when it was first seen ended; zero before
}

// watchSet picks the ranks this rank witnesses in world w: the witnessFanIn
// ranks before it, cyclically, among the ranks of its host other than
// itself whose process this rank can see (same pid and start time in
// /proc: the same pid namespace; another process's pid is never watched).
func watchSet(w bootstrap.World) []*watchedRank {
	if w.Rank < 0 || w.Rank >= len(w.Members) {
		return nil
	}
	me, err := unmarshalEndpoint(w.Members[w.Rank].Blob)
	if err != nil {
		return nil
	}
	type local struct {
		rank int
		ep   *endpoint
	}
	var host []local // the ranks of this host, in rank order, with this one
	at := -1
	for r, m := range w.Members {
		ep, err := unmarshalEndpoint(m.Blob)
		if err != nil || ep.host != me.host {
			continue
		}
		if r == w.Rank {
			at = len(host)
		}
		host = append(host, local{r, ep})
	}
	var set []*watchedRank
	for k := 1; k <= witnessFanIn && k < len(host); k++ {
		p := host[(at-k+len(host))%len(host)]
		if p.ep.pid == me.pid || p.ep.start == 0 {
			continue // the same process (in-process ranks), or no start time to check against
		}
		if _, start, err := procStat(p.ep.pid); err != nil || start != p.ep.start {
			continue // not visible from here (another pid namespace) or already gone
		}
		set = append(set, &watchedRank{rank: p.rank, pid: p.ep.pid, start: p.ep.start})
	}
	return set
}

// frozenOrGone reports whether p, read at now, is to be declared failed:
// stopped for witnessStopped, or ended (a zombie, or gone) for
// witnessEnded. It updates p.
func (p *watchedRank) frozenOrGone(now time.Time) bool {
	state, start, err := procStat(p.pid)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && start != p.start) || err == nil && (state == 'Z' || state == 'X'):
		// Exited (and maybe reaped; its pid may be reused already).
		if p.endedSince.IsZero() {
			p.endedSince = now
		}
		return now.Sub(p.endedSince) >= witnessEnded
	case err != nil:
		return false // cannot tell
	case state == 'T' || state == 't':
		if p.stoppedSince.IsZero() {
			p.stoppedSince = now
		}
		return now.Sub(p.stoppedSince) >= witnessStopped
	}
	p.stoppedSince = time.Time{}
	return false
}

// witness watches the ranks watchSet picks in node's current world until
// stop is closed, and tells node about each one found frozen or gone.
func witness(node *bootstrap.Node, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(witnessEvery)
	defer t.Stop()
	var (
		epoch uint32
		set   []*watchedRank
	)
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if w := node.World(); w.Epoch != epoch {
				epoch, set = w.Epoch, watchSet(w)
			}
			keep := set[:0]
			for _, p := range set {
				if p.frozenOrGone(now) {
					node.Witnessed(epoch, p.rank)
					continue
				}
				keep = append(keep, p)
			}
			set = keep
		}
	}
}

// runningHere says whether m is another process on this host that the
// kernel shows running (not stopped, a zombie or gone), or a rank of this
// process whose gossip node is open (inProcess): the bootstrap's
// Config.Running, so that gossip does not declare a starved process dead.
func runningHere(m bootstrap.Member) bool {
	if _, open := inProcess.Load(m.Name); open {
		return true
	}
	state, ended, ok := stateHere(m)
	return ok && !ended && state != 'T' && state != 't'
}

// inProcess holds the gossip names of this process's Init nodes, from the
// node's start to its leave (init.go): ranks of one process (the tests'
// in-process jobs) are each other's witness, as /proc is for ranks of
// other processes. A starved in-process rank missed its probes under
// load and gossip declared it dead (TestShrinkWithQuorum's Init, at load
// 12 under -race), as a starved rank of another process would have been
// without the kernel's word.
var inProcess sync.Map // node name → struct{}

// endedHere says whether m is another process on this host that has
// ended (gone, or a zombie): the bootstrap's Config.Ended, for a probe
// that finds m's gossip port taken by a new process (a restarted seed
// rank's).
func endedHere(m bootstrap.Member) bool {
	_, ended, ok := stateHere(m)
	return ok && ended
}

// stateHere reads the state of m's process if m is another process on
// this host (ok): its /proc state, and whether it has ended (gone, its
// pid reused, or a zombie). ok is false where it cannot tell.
func stateHere(m bootstrap.Member) (state byte, ended, ok bool) {
	ep, err := unmarshalEndpoint(m.Blob)
	if err != nil || ep.host != hostIdentity() || ep.pid == uint32(os.Getpid()) || ep.start == 0 {
		return 0, false, false
	}
	state, start, err := procStat(ep.pid)
	switch {
	case errors.Is(err, fs.ErrNotExist) || err == nil && start != ep.start:
		return 0, true, true // exited (and reaped; its pid may be reused already)
	case err != nil:
		return 0, false, false
	}
	return state, state == 'Z' || state == 'X', true
}
