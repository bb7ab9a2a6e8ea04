package trace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a rank that records a timeline and then
// waits to be killed (TRACE_TEST_KILLED=FILE), as a rank gorun stops.
func TestMain(m *testing.M) {
	if path := os.Getenv("TRACE_TEST_KILLED"); path != "" {
		r, err := Create(path, Header{Rank: 0, Size: 1}, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		r.SetClockSource(func() (int64, int64, bool) { return killedOffset, killedRTT, true })
		for i := range 10 {
			r.Add(&Event{Kind: KindOp, Name: "allreduce", Seq: uint32(i), Start: int64(i), End: int64(i) + 1})
		}
		time.Sleep(time.Hour) // killed by the test, never closed
	}
	os.Exit(m.Run())
}

// The killed rank's clock: 100 s behind the launcher's, measured with a
// round trip of 1234 ns.
const killedOffset, killedRTT = 100e9, 1234

// A rank killed without closing its Recorder leaves its events: the
// flusher writes them within FlushEvery though the ring is far from half
// full, and the file reads back (not Closed), with the clock offset its
// clock source gave (before, only Close wrote it and a killed rank's
// events stayed on its own clock: 100 s off here, and called late).
func TestKilledRankLeavesEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.0")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRACE_TEST_KILLED="+path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var rf *RankFile
	deadline := time.Now().Add(10*FlushEvery + 10*time.Second)
	for {
		var err error
		rf, err = ReadFile(path)
		if err == nil && len(rf.Events) == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the killed rank's file holds %v (err %v), want 10 events", time.Since(deadline.Add(-10*FlushEvery-10*time.Second)), rf, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the file itself: what the test waits for
	}
	cmd.Process.Kill()
	cmd.Wait()
	if rf, err := ReadFile(path); err != nil || len(rf.Events) != 10 || rf.Closed {
		t.Fatalf("after the kill: %+v, %v; want 10 events, not closed", rf, err)
	} else if rf.Offset != killedOffset || rf.RTT != killedRTT {
		t.Fatalf("after the kill: clock offset %d (rtt %d), want %d (rtt %d)", rf.Offset, rf.RTT, int64(killedOffset), int64(killedRTT))
	}
}

// A file whose last line was cut by a kill reads up to that line; an
// empty file, or one with half a header, is ErrEmpty; a bad line in the
// middle is still an error.
func TestReadTruncated(t *testing.T) {
	header := `{"k":"header","version":1,"rank":0,"size":2,"host":"h","pid":1,"clock":"monotonic"}` + "\n"
	op := `{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":1,"bytes":8,"arg":0,"ts":1000,"end":2000,"wait":-1,"reduce":0}` + "\n"
	rf, err := Read(strings.NewReader(header + op + op[:40]))
	if err != nil || len(rf.Events) != 1 || !rf.Truncated || rf.Closed {
		t.Errorf("cut last line: %+v, %v; want 1 event, Truncated", rf, err)
	}
	rf, err = Read(strings.NewReader(header + op))
	if err != nil || rf.Truncated {
		t.Errorf("whole file: %+v, %v", rf, err)
	}
	for _, text := range []string{"", header[:30]} {
		if _, err := Read(strings.NewReader(text)); !errors.Is(err, ErrEmpty) {
			t.Errorf("Read(%q) = %v, want ErrEmpty", text, err)
		}
	}
	if _, err := Read(strings.NewReader(header + op[:40] + "\n" + op)); err == nil || errors.Is(err, ErrEmpty) {
		t.Errorf("a bad line before the last: %v, want a parse error", err)
	}
}

// A sync line sets the offset; the last line's replaces it unless that
// one was not measured (rtt 0).
func TestReadSync(t *testing.T) {
	header := `{"k":"header","version":1,"rank":0,"size":2,"host":"h","pid":1,"clock":"monotonic"}` + "\n"
	sync := `{"k":"sync","offset":-7,"rtt":3}` + "\n"
	for _, tc := range []struct {
		last        string
		offset, rtt int64
		closed      bool
	}{
		{"", -7, 3, false},
		{`{"k":"clock","offset":0,"rtt":0}` + "\n", -7, 3, true},
		{`{"k":"clock","offset":-9,"rtt":2}` + "\n", -9, 2, true},
	} {
		rf, err := Read(strings.NewReader(header + sync + tc.last))
		if err != nil || rf.Offset != tc.offset || rf.RTT != tc.rtt || rf.Closed != tc.closed {
			t.Errorf("last line %q: %+v, %v; want offset %d, rtt %d, closed %v", tc.last, rf, err, tc.offset, tc.rtt, tc.closed)
		}
	}
}

// ReadRanks merges what the ranks left: an empty file (a rank killed
// before its first flush) and a missing one are reported, not fatal, also
// when rank 0's is the empty one and the size comes from another header.
func TestReadRanksEmptyFiles(t *testing.T) {
	base := filepath.Join(t.TempDir(), "tl.json")
	for r, text := range []string{"", "", ""} {
		if r == 2 {
			text = `{"k":"header","version":1,"rank":2,"size":4,"host":"h","pid":1,"clock":"monotonic"}` + "\n" +
				`{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":1,"bytes":8,"arg":0,"ts":1000,"end":2000,"wait":-1,"reduce":0}` + "\n"
		}
		if err := os.WriteFile(fmt.Sprintf("%s.%d", base, r), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int{4, 0} {
		files, missing, err := ReadRanks(base, size)
		if err != nil || len(files) != 1 || files[0].Header.Rank != 2 || fmt.Sprint(missing) != "[0 1 3]" {
			t.Fatalf("ReadRanks(size %d) = %d files, missing %v, %v; want rank 2, missing [0 1 3]", size, len(files), missing, err)
		}
		s := Summarize(files).String()
		if !strings.Contains(s, "report: 1 of 4 ranks") || !strings.Contains(s, "no events from rank 0, 1, 3") {
			t.Errorf("report does not name the silent ranks:\n%s", s)
		}
		var merged bytes.Buffer
		if err := Merge(&merged, files); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(base+".2", nil, 0o644)
	if _, missing, err := ReadRanks(base, 0); err == nil || fmt.Sprint(missing) != "[0 1 2]" {
		t.Errorf("no rank wrote anything: missing %v, %v; want an error and [0 1 2]", missing, err)
	}
}

// Flush has the flusher write what the ring holds at once, not at its next
// tick: comm's Close flushes first, so that a rank stopped while its
// goodbyes wait for a frozen peer keeps its last second of events.
func TestFlush(t *testing.T) {
	flushEvery = time.Hour // only Flush writes the events
	t.Cleanup(func() { flushEvery = FlushEvery })
	path := filepath.Join(t.TempDir(), "tl.0")
	r, err := Create(path, Header{Rank: 0, Size: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 3 {
		r.Add(&Event{Kind: KindOp, Name: "allreduce", Seq: uint32(i), Start: int64(i), End: int64(i) + 1})
	}
	r.Flush()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rf, err := ReadFile(path)
		if err == nil && len(rf.Events) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after Flush the file holds %v (err %v), want 3 events", rf, err)
		}
	}
}
