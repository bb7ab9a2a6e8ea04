package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lane is one communicator's lane in a test file: its operations start at
// at + i·step (+ late), for seqs first, first+1, ...
type lane struct {
	name          string
	info          CommInfo
	first, n      int
	at, step, dur int64
	late          int64
}

// writeRank records lanes to path as comm would: one Recorder, a lane
// and a comm record per communicator, allreduces on it.
func writeRank(t *testing.T, path string, h Header, lanes []lane) {
	t.Helper()
	rec, err := Create(path, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lanes {
		id := rec.Lane(l.name)
		rec.SetComm(id, l.info)
		for i := range l.n {
			start := l.at + int64(i)*l.step + l.late
			rec.Add(&Event{Kind: KindOp, Lane: id, Name: "allreduce", Algo: "ring", Seq: uint32(l.first + i), Bytes: 8,
				Start: start, End: l.at + int64(i)*l.step + l.dur, Wait: -1})
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// A job of 3 ranks under gorun --elastic --max-restarts 1: rank 1 is
// killed in the world's 4th allreduce, ranks 0 and 2 shrink (comm 1),
// rank 1 restarted (GORUN_RESTART=1) writes tl.1.restart1 and joins them
// through Grow (their comm 2, its comm). ReadRanks returns rank 1 with
// both incarnations, Merge shows both in rank 1's process, Remove deletes
// both files, and the report compares the restarted rank on the
// communicator it shares with the others: on time there, it is not a
// straggler. Before, its restarted process overwrote tl.1 (the first
// incarnation's events were lost), and its "comm" (the grown
// communicator) was compared with the survivors' "comm" (the first
// world): it was named the straggler, ~100 ms late to every collective.
func TestReadRanksRestartedRank(t *testing.T) {
	ms := int64(time.Millisecond)
	base := filepath.Join(t.TempDir(), "tl")
	world, shrunk, grown := uint64(0xa), uint64(0xb), uint64(0xc)
	for r := range 3 {
		if r == 1 {
			writeRank(t, RestartPath(base, 1, 0), Header{Rank: 1, Size: 3},
				[]lane{{name: "comm", info: CommInfo{Rank: 1, Size: 3, ID: world}, first: 1, n: 3, at: 0, step: 10 * ms, dur: 5 * ms}})
			writeRank(t, RestartPath(base, 1, 1), Header{Rank: 1, Size: 3, Restart: 1},
				[]lane{{name: "comm", info: CommInfo{Rank: 1, Size: 3, ID: grown}, first: 1, n: 5, at: 100 * ms, step: 10 * ms, dur: 5 * ms}})
			continue
		}
		late := int64(0)
		if r == 2 {
			late = 2 * ms // last everywhere, as the survivors' runs go: not the point here
		}
		writeRank(t, RestartPath(base, r, 0), Header{Rank: r, Size: 3}, []lane{
			{name: "comm", info: CommInfo{Rank: r, Size: 3, ID: world}, first: 1, n: 4, at: 0, step: 10 * ms, dur: 5 * ms, late: late / 4},
			{name: "comm 1", info: CommInfo{Rank: r / 2, Size: 2, ID: shrunk}, first: 1, n: 2, at: 50 * ms, step: 10 * ms, dur: 5 * ms},
			{name: "comm 2", info: CommInfo{Rank: r, Size: 3, ID: grown}, first: 1, n: 5, at: 100 * ms, step: 10 * ms, dur: 5 * ms, late: late / 4},
		})
	}
	files, missing, err := ReadRanks(base, 0)
	if err != nil || len(files) != 3 || len(missing) != 0 {
		t.Fatalf("ReadRanks: %d files, missing %v, %v", len(files), missing, err)
	}
	r1 := files[1]
	if len(r1.Events) != 3 || len(r1.Restarts) != 1 || len(r1.Restarts[0].Events) != 5 || r1.Restarts[0].Header.Restart != 1 {
		t.Fatalf("rank 1: %d events and %d restarts; want 3, and one restart with 5", len(r1.Events), len(r1.Restarts))
	}

	var buf bytes.Buffer
	if err := Merge(&buf, files); err != nil {
		t.Fatal(err)
	}
	ct, err := ReadChrome(&buf)
	if err != nil {
		t.Fatal(err)
	}
	threads := map[int]string{}
	ops := map[int]int{}
	for _, e := range ct.TraceEvents {
		if e.PID != 1 {
			continue
		}
		if e.Ph == "M" && e.Name == "thread_name" {
			threads[e.TID], _ = e.Args["name"].(string)
		}
		if e.Ph == "X" && e.Name == "allreduce" {
			ops[e.TID]++
		}
	}
	if threads[0] != "comm" || threads[1<<16] != "comm (restart 1)" || ops[0] != 3 || ops[1<<16] != 5 {
		t.Errorf("rank 1's threads %v, allreduces per thread %v; want comm with 3, comm (restart 1) with 5", threads, ops)
	}

	s := Summarize(files)
	if s.Straggler != -1 || !slices.Equal(s.Restarted, []int{1}) {
		t.Errorf("straggler %d, restarted %v; want none, [1]\n%s", s.Straggler, s.Restarted, s)
	}
	// Matched: the world's 3 that rank 1 entered before it died, the
	// shrunk communicator's 2, the grown one's 5.
	if s.Matched != 10 || s.Comms != 3 || s.Late[1].Ops != 8 || s.Late[1].MaxLate != 0 {
		t.Errorf("matched %d over %d communicators, rank 1 %+v; want 10 over 3, rank 1 in 8, never late\n%s", s.Matched, s.Comms, s.Late[1], s)
	}
	if r := s.String(); !strings.Contains(r, "restarted: rank 1") || strings.Contains(r, "straggler: rank 1") {
		t.Errorf("report:\n%s", r)
	}

	Remove(files)
	if left, _ := filepath.Glob(base + ".*"); len(left) != 0 {
		t.Errorf("Remove left %v", left)
	}
}

// An incarnation that wrote only its header (killed in its first second)
// is passed over, and its file removed, when a later one has events: the
// rank is not reported without events.
func TestReadRanksPassesOverEmptyIncarnation(t *testing.T) {
	ms := int64(time.Millisecond)
	base := filepath.Join(t.TempDir(), "tl")
	writeRank(t, RestartPath(base, 0, 0), Header{Rank: 0, Size: 1}, nil)
	writeRank(t, RestartPath(base, 0, 1), Header{Rank: 0, Size: 1, Restart: 1},
		[]lane{{name: "comm", info: CommInfo{Rank: 0, Size: 1, ID: 1}, n: 2, step: ms, dur: ms}})
	files, missing, err := ReadRanks(base, 1)
	if err != nil || len(files) != 1 || len(missing) != 0 {
		t.Fatalf("ReadRanks: %d files, missing %v, %v", len(files), missing, err)
	}
	if f := files[0]; len(f.Events) != 2 || f.Header.Restart != 1 || len(f.Restarts) != 0 {
		t.Errorf("rank 0: restart %d, %d events, %d restarts; want restart 1's 2 events alone", f.Header.Restart, len(f.Events), len(f.Restarts))
	}
	Remove(files)
	if _, err := os.Stat(RestartPath(base, 0, 0)); !os.IsNotExist(err) {
		t.Errorf("the empty incarnation's file is still there: %v", err)
	}
}

// commFile is a RankFile (as read back) with one allreduce lane per
// communicator in lanes.
func commFile(rank, size int, lanes []lane) *RankFile {
	rf := &RankFile{Header: Header{Rank: rank, Size: size, Host: "h"}, Closed: true}
	for i, l := range lanes {
		rf.Lanes = append(rf.Lanes, l.name)
		rf.Comms = append(rf.Comms, l.info)
		for k := range l.n {
			rf.Events = append(rf.Events, Event{Kind: KindOp, Lane: uint16(i), Name: "allreduce", Algo: "ring",
				Seq: uint32(l.first + k), Bytes: 1 << 20, Start: l.at + int64(k)*l.step + l.late, End: l.at + int64(k)*l.step + l.dur})
		}
	}
	return rf
}

// Arrivals are compared per communicator, among its own members. Four
// ranks split in two ({0,2} and {1,3}, both "comm 1" on their ranks, with
// the same sequence numbers, at the same time): rank 3 enters each of
// its half's allreduces 4 ms late; the world's two are on time. Rank 3
// is the straggler, and ranks 0 and 2 are compared only with each other.
// Before, only the world communicator was compared: no straggler.
func TestSummarizePerCommunicator(t *testing.T) {
	ms := int64(time.Millisecond)
	const world, even, odd = 1, 2, 3
	var files []*RankFile
	for r := range 4 {
		id, late := uint64(even), int64(0)
		if r%2 == 1 {
			id = odd
		}
		if r == 3 {
			late = 4 * ms
		}
		files = append(files, commFile(r, 4, []lane{
			{name: "comm", info: CommInfo{Rank: r, Size: 4, ID: world}, n: 2, step: 10 * ms, dur: 5 * ms},
			{name: "comm 1", info: CommInfo{Rank: r / 2, Size: 2, ID: id}, n: 6, at: 50 * ms, step: 10 * ms, dur: 6 * ms, late: late},
		}))
	}
	s := Summarize(files)
	if s.Straggler != 3 || s.Comms != 3 || s.Matched != 2+6+6 {
		t.Errorf("straggler %d, %d collectives of %d communicators; want rank 3, 14 of 3\n%s", s.Straggler, s.Matched, s.Comms, s)
	}
	if l := s.Late[3]; l.Ops != 8 || l.Last != 6 || l.MeanLate != 3*time.Millisecond {
		t.Errorf("rank 3 %+v: want last in its half's 6 of 8, 3ms late on average", l)
	}
	for _, r := range []int{0, 1, 2} {
		if l := s.Late[r]; l.Ops != 8 || l.MaxLate != 0 {
			t.Errorf("rank %d %+v: want 8 collectives, never late (compared with its own half only)", r, l)
		}
	}
}
