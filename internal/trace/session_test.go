package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process that made a rank's first communicator twice (a second
// comm.Init after Close, NewLocal again) wrote tl.R and tl.R.init1.
// ReadRanks folds the session into the rank: its lanes after the first's,
// named "LANE (init 1)", with their communicators; a rank whose first
// file is empty is its session's; a session file of another process (a
// stale one: its pid differs) is left alone, by Remove too.
func TestReadRanksSessions(t *testing.T) {
	ms := int64(time.Millisecond)
	base := filepath.Join(t.TempDir(), "tl")
	first, second := uint64(0xa), uint64(0xb)
	writeRank(t, RestartPath(base, 0, 0), Header{Rank: 0, Size: 2, PID: 7},
		[]lane{{name: "comm", info: CommInfo{Rank: 0, Size: 2, ID: first}, first: 0, n: 2, at: 0, step: 10 * ms, dur: 5 * ms}})
	writeRank(t, SessionPath(RestartPath(base, 0, 0), 1), Header{Rank: 0, Size: 2, PID: 7, Init: 1},
		[]lane{{name: "comm", info: CommInfo{Rank: 0, Size: 2, ID: second}, first: 0, n: 3, at: 50 * ms, step: 10 * ms, dur: 5 * ms}})
	stale := SessionPath(RestartPath(base, 0, 0), 2)
	writeRank(t, stale, Header{Rank: 0, Size: 2, PID: 99, Init: 2},
		[]lane{{name: "comm", info: CommInfo{Rank: 0, Size: 2, ID: 0xc}, first: 0, n: 1, at: 0, step: ms, dur: ms}})
	// Rank 1's first communicator wrote nothing (not even its header).
	if err := os.WriteFile(RestartPath(base, 1, 0), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writeRank(t, SessionPath(RestartPath(base, 1, 0), 1), Header{Rank: 1, Size: 2, PID: 7, Init: 1},
		[]lane{{name: "comm", info: CommInfo{Rank: 1, Size: 2, ID: second}, first: 0, n: 3, at: 50 * ms, step: 10 * ms, dur: 5 * ms}})

	files, missing, err := ReadRanks(base, 0)
	if err != nil || len(files) != 2 || len(missing) != 0 {
		t.Fatalf("ReadRanks: %d files, missing %v, %v", len(files), missing, err)
	}
	r0 := files[0]
	if got := strings.Join(r0.Lanes, ","); got != "comm,comm (init 1)" || len(r0.Comms) != 2 || r0.Comms[1].ID != second {
		t.Errorf("rank 0: lanes %q, comms %+v; want comm, comm (init 1) of %x", got, r0.Comms, second)
	}
	lanes := map[uint16]int{}
	for _, e := range r0.Events {
		lanes[e.Lane]++
	}
	if len(r0.Events) != 5 || lanes[0] != 2 || lanes[1] != 3 || !r0.Closed || len(r0.Restarts) != 0 {
		t.Errorf("rank 0: %d events by lane %v, closed %v, %d restarts; want 2 on lane 0, 3 on lane 1, closed, none", len(r0.Events), lanes, r0.Closed, len(r0.Restarts))
	}
	if r1 := files[1]; len(r1.Events) != 3 || r1.Header.Init != 1 {
		t.Errorf("rank 1: %d events, header %+v; want its session's 3", len(r1.Events), r1.Header)
	}
	var merged bytes.Buffer
	if err := Merge(&merged, files); err != nil || !strings.Contains(merged.String(), `"name":"comm (init 1)"`) {
		t.Errorf("Merge: %v, no thread named comm (init 1)", err)
	}
	// The second communicator's collectives are matched across the ranks.
	if s := Summarize(files); s.Matched != 3 || len(s.Restarted) != 0 {
		t.Errorf("report: %d matched, restarted %v; want 3, none\n%s", s.Matched, s.Restarted, s)
	}
	Remove(files)
	left, _ := filepath.Glob(base + ".*")
	if len(left) != 1 || left[0] != stale {
		t.Errorf("Remove left %v, want only the stale %s", left, stale)
	}
}

// fold: the session's drops stay before its own events, and the rank is
// closed when every session closed, cut when one was.
func TestFoldSession(t *testing.T) {
	f := &RankFile{Lanes: []string{"comm"}, Events: make([]Event, 2), Closed: true}
	s := &RankFile{Path: "s", Lanes: []string{"comm", "user"}, Events: []Event{{Lane: 1}, {Lane: 0}},
		Drops: []Drop{{N: 4, Before: 1}}, Dropped: 4, Truncated: true, Offset: 5, RTT: 1}
	f.fold(s, 2)
	if f.Lanes[2] != "user (init 2)" || f.Events[2].Lane != 2 || f.Events[3].Lane != 1 {
		t.Errorf("lanes %q, events %+v", f.Lanes, f.Events)
	}
	if len(f.Drops) != 1 || f.Drops[0].Before != 3 || f.Dropped != 4 {
		t.Errorf("drops %+v (%d), want 4 before event 3", f.Drops, f.Dropped)
	}
	if f.Closed || !f.Truncated || f.Offset != 5 || f.RTT != 1 {
		t.Errorf("closed %v, truncated %v, offset %d rtt %d; want open, cut, the session's measurement", f.Closed, f.Truncated, f.Offset, f.RTT)
	}
}
