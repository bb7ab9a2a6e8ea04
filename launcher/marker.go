package launcher

import (
	"bytes"
	"fmt"
	"os"
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
//	exit STATUS [RANK HOST]   the program's status, 128+N for signal N (RANK, HOST under srun)
//	wdir [RANK HOST]          -wdir is missing there
//	step JOB.STEP             srun: the job step, from task 0

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

// statusError is the failure of a rank whose wrapper reported status s
// (a shell's $?: 128+N for signal N), or nil for 0.
func statusError(rank int, host string, s int) *RankError {
	if s == 0 {
		return nil
	}
	re := &RankError{Rank: rank, Host: host, ExitCode: s, Err: ErrRankFailed}
	if s > 128 && s < 128+65 {
		re.ExitCode, re.Signal = -1, syscall.Signal(s-128)
	}
	return re
}

// remoteRank is what a rank started through the agent reported with its
// markers (tokenScript). The stderr copier writes it; the runner reads
// pid while the rank runs, and the rest after Wait.
type remoteRank struct {
	dir    string       // -wdir, for the error
	pid    atomic.Int64 // its process group there, 0 before the pid marker
	status atomic.Int64 // 1 + the exit marker's status, 0 before it
	nodir  atomic.Bool
}

func (rr *remoteRank) tap(line []byte) bool {
	w := parseMarker(line)
	switch {
	case len(w) == 2 && w[0] == "pid":
		if n, err := strconv.Atoi(w[1]); err == nil && n > 1 {
			rr.pid.Store(int64(n))
		}
	case len(w) == 2 && w[0] == "exit":
		if n, err := strconv.Atoi(w[1]); err == nil && n >= 0 {
			rr.status.Store(int64(n) + 1)
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
	if s := rr.status.Load(); s > 0 {
		return statusError(p.rank, p.host, int(s-1)), true
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

func (st *srunTasks) tap(stream int) func([]byte) bool {
	return func(line []byte) bool {
		rank, text := cutLabel(line)
		w := parseMarker(text)
		if len(w) == 2 && w[0] == "step" {
			st.mu.Lock()
			st.step = w[1]
			st.mu.Unlock()
			return true
		}
		if len(w) >= 2 && (w[0] == "exit" || w[0] == "wdir") {
			st.report(w)
			return true
		}
		if rank >= 0 && rank < len(st.logs) {
			f := st.logs[rank][stream]
			f.Write(append(text, '\n'))
		}
		return false
	}
}

// report records an exit or wdir marker: exit STATUS RANK HOST, wdir RANK HOST.
func (st *srunTasks) report(w []string) {
	var re *RankError
	switch {
	case w[0] == "exit" && len(w) >= 3:
		s, err1 := strconv.Atoi(w[1])
		rank, err2 := strconv.Atoi(w[2])
		if err1 != nil || err2 != nil {
			return
		}
		re = statusError(rank, word(w, 3), s)
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
