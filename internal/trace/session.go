package trace

// A rank's sessions: the recorders one process opened for the same
// rank's file after the first (SessionPath), folded into it when read.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// readSessions reads path, a rank's file, with the files of its process's
// later recorders (path.initN, SessionPath) folded in (fold), and returns
// the session files that held nothing, for Remove. A session file of
// another process (a stale one, of an earlier job: its pid or rank
// differ) is left alone. Without a readable path, the first readable
// session is the rank's file. The error is path's, as ReadFile's, when no
// file could be read.
func readSessions(path string) (*RankFile, []string, error) {
	rf, err := ReadFile(path)
	ns := sessionsOf(path)
	if len(ns) == 0 || err != nil && !os.IsNotExist(err) && !errors.Is(err, ErrEmpty) {
		return rf, nil, err
	}
	var empty []string
	for _, n := range ns {
		p := SessionPath(path, n)
		s, serr := ReadFile(p)
		switch {
		case errors.Is(serr, ErrEmpty):
			empty = append(empty, p)
		case os.IsNotExist(serr):
		case serr != nil:
			return nil, nil, serr
		case rf == nil:
			rf = s
		case s.Header.PID == rf.Header.PID && s.Header.Rank == rf.Header.Rank:
			rf.fold(s, n)
		}
	}
	if rf == nil {
		return nil, empty, err
	}
	if errors.Is(err, ErrEmpty) {
		empty = append(empty, path)
	}
	return rf, empty, nil
}

// fold adds s, the file of the n-th later recorder of f's process
// (SessionPath), to f: s's lanes after f's, named "LANE (init N)", with
// their communicators, events and drops. f is closed when both are, cut
// when either is; its clock offset is f's unless only s measured one (one
// process, one clock).
func (f *RankFile) fold(s *RankFile, n int) {
	off := len(f.Lanes)
	if off+len(s.Lanes) >= 1<<16 { // lanes are uint16
		return
	}
	for _, ln := range s.Lanes {
		f.Lanes = append(f.Lanes, fmt.Sprintf("%s (init %d)", ln, n))
	}
	for lane, c := range s.Comms {
		if c.Size == 0 {
			continue
		}
		for len(f.Comms) <= off+lane {
			f.Comms = append(f.Comms, CommInfo{})
		}
		f.Comms[off+lane] = c
	}
	before := len(f.Events)
	for _, e := range s.Events {
		e.Lane += uint16(off)
		f.Events = append(f.Events, e)
	}
	for _, d := range s.Drops {
		d.Before += before
		f.Drops = append(f.Drops, d)
	}
	f.Dropped += s.Dropped
	f.Closed = f.Closed && s.Closed
	f.Truncated = f.Truncated || s.Truncated
	if f.RTT == 0 && s.RTT != 0 {
		f.Offset, f.RTT = s.Offset, s.RTT
	}
	f.sessions = append(f.sessions, s.Path)
}

// sessionsOf lists the numbers of the files path.initN, in order.
func sessionsOf(path string) []int {
	ents, _ := os.ReadDir(filepath.Dir(path))
	prefix := filepath.Base(path) + sessionSuffix
	var out []int
	for _, e := range ents {
		if ns, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if n, err := strconv.Atoi(ns); err == nil && n > 0 && SessionPath(path, n) == filepath.Join(filepath.Dir(path), e.Name()) {
				out = append(out, n)
			}
		}
	}
	sort.Ints(out)
	return out
}
