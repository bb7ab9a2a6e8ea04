package launcher

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// marker starts the lines that gorun's wrappers (tokenScript on remote
// hosts, srunTaskScript under srun) print on a rank's stderr to tell gorun
// what the agent or srun cannot: the remote process group, the rank's own
// exit status, a missing -wdir. The console never shows them. A rank could
// print one itself, but would only misreport its own status.
const marker = "\x1egorun:"

// The markers, after marker:
//
//	pid PGID                  remote: the script's process group
//	exit STATUS [RANK HOST]   the program exited with STATUS (RANK, HOST under srun)
//	signal N [RANK HOST]      the program was killed by signal N
//	wdir [RANK HOST]          -wdir is missing there
//	step JOB.STEP             srun: the job step, from task 0
//
// runQuiet (agent.go) tells exit from signal, and says when it cannot.

// parseMarker returns the words of a marker line, or nil.
func parseMarker(line []byte) []string {
	rest, ok := bytes.CutPrefix(line, []byte(marker))
	if !ok {
		return nil
	}
	return words(bytes.Fields(rest))
}

func words(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// endError is the failure that an exit or signal marker reports
// (kind "exit" or "signal", n its number), nil for exit 0; ok is false
// for anything else.
func endError(rank int, host, kind, n string) (re *RankError, ok bool) {
	v, err := strconv.Atoi(n)
	switch {
	case err != nil:
		return nil, false
	case kind == "exit" && v == 0:
		return nil, true
	case kind == "exit" && v > 0:
		return &RankError{Rank: rank, Host: host, ExitCode: v, Err: ErrRankFailed}, true
	case kind == "signal" && v > 0 && v < 65:
		return &RankError{Rank: rank, Host: host, ExitCode: -1, Signal: syscall.Signal(v), Err: ErrRankFailed}, true
	}
	return nil, false
}

// remoteRank is what a rank started through the agent reported with its
// markers (tokenScript). The stderr copier writes it; the runner reads
// pid while the rank runs, and the rest after Wait.
type remoteRank struct {
	dir   string       // -wdir, for the error
	pid   atomic.Int64 // its process group there, 0 before the pid marker
	nodir atomic.Bool
	ended atomic.Bool               // an exit or signal marker came, and set end
	end   atomic.Pointer[RankError] // its failure, nil for exit 0

	// Signals that do not stop the rank (SIGUSR1, SIGUSR2) sent before
	// the pid marker, delivered through send once it comes. mu guards
	// held and the pid's first store, so that a signal is either held or
	// sees the pid. send is set before the rank starts.
	mu   sync.Mutex
	held []syscall.Signal
	send func(pgid int, sig syscall.Signal)
	// connected, if set (before the rank starts), is called once, at the
	// pid marker: the rank's session runs (sshstart.go).
	connected func()
}

// pidOrHold returns the rank's process group there, or 0; with 0, a
// signal that does not stop the rank is held for the pid marker (held).
func (rr *remoteRank) pidOrHold(sig syscall.Signal) (pgid int, held bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if pid := rr.pid.Load(); pid > 0 {
		return int(pid), false
	}
	if stops(sig) {
		return 0, false
	}
	if !slices.Contains(rr.held, sig) { // as the kernel keeps one of each pending
		rr.held = append(rr.held, sig)
	}
	return 0, true
}

// setPID records the pid marker's process group and sends the signals
// held for it.
func (rr *remoteRank) setPID(pgid int) {
	rr.mu.Lock()
	held := rr.held
	rr.held = nil
	first := rr.pid.Load() == 0
	if first {
		rr.pid.Store(int64(pgid))
	}
	rr.mu.Unlock()
	if first && rr.connected != nil {
		rr.connected()
	}
	for _, sig := range held {
		if rr.send != nil {
			rr.send(pgid, sig)
		}
	}
}

// tap reads the markers of the rank's stderr (rankWriter.tap).
func (rr *remoteRank) tap(line []byte) int {
	return splitMarker(line, rr.mark)
}

// splitMarker is how much of line a tap shows: -1 for a marker line that
// mark takes, the text before a marker that mark takes after a last line
// without a newline, else all of it.
func splitMarker(line []byte, mark func(m []byte) bool) int {
	i := bytes.Index(line, []byte(marker))
	switch {
	case i < 0 || !mark(line[i:]):
		return len(line)
	case i == 0:
		return -1
	}
	return i
}

// mark records what the marker m says; false if it is none of the rank's.
func (rr *remoteRank) mark(m []byte) bool {
	w := parseMarker(m)
	switch {
	case len(w) == 2 && w[0] == "pid":
		if n, err := strconv.Atoi(w[1]); err == nil && n > 1 {
			rr.setPID(n)
		}
	case len(w) == 2 && (w[0] == "exit" || w[0] == "signal"):
		if re, ok := endError(-1, "", w[0], w[1]); ok {
			rr.end.Store(re)
			rr.ended.Store(true)
		}
	case len(w) == 1 && w[0] == "wdir":
		rr.nodir.Store(true)
	default:
		return false
	}
	return true
}

// failure is how the remote rank p ended, from its markers and the agent's
// status; ok is false when the markers say nothing.
func (rr *remoteRank) failure(p *proc) (re *RankError, ok bool) {
	if rr.nodir.Load() {
		return &RankError{Rank: p.rank, Host: p.host, ExitCode: -1,
			Err: fmt.Errorf("%w: -wdir %s: cannot change to it there", ErrLaunch, rr.dir)}, true
	}
	if rr.ended.Load() {
		if end := rr.end.Load(); end != nil {
			re := *end
			re.Rank, re.Host = p.rank, p.host
			return &re, true
		}
		return nil, true
	}
	if ps := p.cmd.ProcessState; ps != nil && ps.ExitCode() == 255 {
		why := "could not connect or start the rank"
		if rr.pid.Load() > 0 {
			why = "the connection was lost while the rank ran"
		}
		return &RankError{Rank: p.rank, Host: p.host, ExitCode: 255,
			Err: fmt.Errorf("%w: the launch agent exited with status 255: %s", ErrLaunch, why)}, true
	}
	return nil, false
}

// srunTasks reads srun's output: the tasks' exit markers (srunTaskScript),
// and with --output-filename each task's lines, by srun's --label, into
// its files. One tap per stream, each on its copier's goroutine.
type srunTasks struct {
	mu     sync.Mutex
	dir    string       // -wdir, for its error
	step   string       // the job step, "" before task 0's marker
	failed *RankError   // the first task that reported a failure
	logs   [][]*os.File // [rank][stdout, stderr], --output-filename
}

func (st *srunTasks) tap(stream int) func([]byte) int {
	return func(line []byte) int {
		rank, text := cutLabel(line)
		label := len(line) - len(text)
		n := splitMarker(text, st.mark)
		if n < 0 {
			return -1
		}
		if rank >= 0 && rank < len(st.logs) {
			f := st.logs[rank][stream]
			f.Write(append(text[:n], '\n')) // text[n] is the marker's, or free
		}
		return label + n
	}
}

// mark records what the marker m says; false if it is none of srun's
// tasks'.
func (st *srunTasks) mark(m []byte) bool {
	w := parseMarker(m)
	if len(w) == 2 && w[0] == "step" {
		st.mu.Lock()
		st.step = w[1]
		st.mu.Unlock()
		return true
	}
	if len(w) >= 2 && (w[0] == "exit" || w[0] == "signal" || w[0] == "wdir") {
		st.report(w)
		return true
	}
	return false
}

// report records an exit, signal or wdir marker: exit STATUS RANK HOST,
// signal N RANK HOST, wdir RANK HOST.
func (st *srunTasks) report(w []string) {
	var re *RankError
	switch {
	case (w[0] == "exit" || w[0] == "signal") && len(w) >= 3:
		rank, err := strconv.Atoi(w[2])
		if err != nil {
			return
		}
		re, _ = endError(rank, word(w, 3), w[0], w[1])
	case w[0] == "wdir" && len(w) >= 2:
		rank, err := strconv.Atoi(w[1])
		if err != nil {
			return
		}
		re = &RankError{Rank: rank, Host: word(w, 2), ExitCode: -1,
			Err: fmt.Errorf("%w: -wdir %s: cannot change to it there", ErrLaunch, st.dir)}
	}
	if re == nil {
		return
	}
	st.mu.Lock()
	if st.failed == nil {
		st.failed = re
	}
	st.mu.Unlock()
}

func word(w []string, i int) string {
	if i < len(w) {
		return w[i]
	}
	return ""
}

func (st *srunTasks) jobStep() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.step
}

func (st *srunTasks) failure() *RankError {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.failed
}

// cutLabel splits srun's "RANK: " label (padded with spaces) off line;
// rank is -1 without one.
func cutLabel(line []byte) (rank int, text []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 || i+1 >= len(line) || line[i+1] != ' ' {
		return -1, line
	}
	n, err := strconv.Atoi(string(bytes.TrimLeft(line[:i], " ")))
	if err != nil || n < 0 {
		return -1, line
	}
	return n, line[i+2:]
}

func (st *srunTasks) close() {
	for _, fs := range st.logs {
		for _, f := range fs {
			f.Close()
		}
	}
}
