package trace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// buffer is an io.WriteCloser whose writes can be held up, as a slow disk.
type buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	gate    chan struct{} // nil: writes go through
	entered chan struct{} // receives once when a write blocks on gate
	closed  bool
}

func (w *buffer) Write(p []byte) (int, error) {
	if w.gate != nil {
		select {
		case w.entered <- struct{}{}:
		default:
		}
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *buffer) Close() error { w.mu.Lock(); w.closed = true; w.mu.Unlock(); return nil }

func TestRoundTrip(t *testing.T) {
	w := &buffer{}
	r := New(w, Header{Rank: 1, Size: 2, Host: "h\"ost", PID: 42}, 64)
	lane := r.Lane("ddp bucket 0")
	if again := r.Lane("ddp bucket 0"); again != lane || lane != 1 {
		t.Fatalf("Lane: %d then %d, want 1 twice", lane, again)
	}
	want := []Event{
		{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: 3, Bytes: 8, Start: 100, End: 200, Wait: 10, Reduce: 5},
		{Kind: KindSpan, Lane: lane, Name: "bucket", Arg: 2, Start: 150, End: 300},
		{Kind: KindInstant, Lane: lane, Name: "grad ready", Arg: 7, Start: 160, End: 160},
		{Kind: KindOp, Name: "barrier", Algo: "dissemination", Seq: 4, Start: 400, End: 500, Wait: -1, Err: true},
	}
	for i := 0; i < 5; i++ { // more than the ring: the flusher must keep up
		for j := range want {
			r.Add(&want[j])
		}
	}
	r.SetClock(-1234, 56)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if !w.closed {
		t.Error("Close did not close the writer")
	}
	rf, err := Read(&w.b)
	if err != nil {
		t.Fatalf("%v\n%s", err, w.b.String())
	}
	if rf.Header != (Header{Rank: 1, Size: 2, Host: "h\"ost", PID: 42}) {
		t.Errorf("header %+v", rf.Header)
	}
	if rf.Offset != -1234 || rf.RTT != 56 || !rf.Closed {
		t.Errorf("clock %d rtt %d closed %v", rf.Offset, rf.RTT, rf.Closed)
	}
	if len(rf.Lanes) != 2 || rf.Lanes[1] != "ddp bucket 0" {
		t.Errorf("lanes %q", rf.Lanes)
	}
	if rf.Dropped != 0 || len(rf.Events) != 5*len(want) {
		t.Fatalf("%d events, %d dropped; want %d, 0", len(rf.Events), rf.Dropped, 5*len(want))
	}
	for i, e := range rf.Events {
		if e != want[i%len(want)] {
			t.Errorf("event %d = %+v, want %+v", i, e, want[i%len(want)])
		}
	}
}

// A writer that falls behind costs events, not the job: the ring drops the
// oldest and the file says how many, where.
func TestOverflowDropsOldest(t *testing.T) {
	w := &buffer{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	r := New(w, Header{Rank: 0, Size: 1}, 8)
	// The flusher writes the header and blocks in the writer.
	r.Add(&Event{Kind: KindInstant, Name: "first", Arg: 0})
	for i := 1; i < 4; i++ {
		r.Add(&Event{Kind: KindInstant, Name: "e", Arg: int64(i)}) // the 4th kicks the flusher
	}
	<-w.entered
	// While it is stuck, 100 more events arrive.
	for i := 4; i < 104; i++ {
		r.Add(&Event{Kind: KindInstant, Name: "e", Arg: int64(i)})
	}
	close(w.gate)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	text := w.b.String()
	rf, err := Read(&w.b)
	if err != nil {
		t.Fatal(err)
	}
	if rf.Dropped == 0 {
		t.Fatal("no drop recorded")
	}
	if got := uint64(len(rf.Events)) + rf.Dropped; got != 104 {
		t.Errorf("%d events + %d dropped = %d, want 104", len(rf.Events), rf.Dropped, got)
	}
	last := rf.Events[len(rf.Events)-1]
	if last.Arg != 103 {
		t.Errorf("last event %d, want the newest (103)", last.Arg)
	}
	for i := 1; i < len(rf.Events); i++ {
		if rf.Events[i].Arg <= rf.Events[i-1].Arg {
			t.Fatalf("events out of order at %d: %d after %d", i, rf.Events[i].Arg, rf.Events[i-1].Arg)
		}
	}
	if !strings.Contains(text, `{"k":"dropped","n":`) {
		t.Error("the file does not say events were dropped")
	}
	// The merged timeline says so too, where the events were lost: an
	// instant on the rank's process just before the first event kept after
	// the gap.
	var merged bytes.Buffer
	if err := Merge(&merged, []*RankFile{rf}); err != nil {
		t.Fatal(err)
	}
	ct, err := ReadChrome(&merged)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d events dropped (the writer fell behind)", rf.Dropped)
	marker, next := -1, -1
	for i, e := range ct.TraceEvents {
		if e.Name == want && e.Ph == "i" && e.PID == 0 {
			marker = i
		}
		if marker >= 0 && next < 0 && i > marker && e.Ph == "i" && e.Name == "e" {
			next = i
		}
	}
	if marker < 0 {
		t.Fatalf("merged timeline has no %q marker", want)
	}
	if next < 0 || ct.TraceEvents[next].Args["arg"].(float64) != float64(rf.Events[rf.Drops[0].Before].Arg) {
		t.Errorf("the marker is not followed by the first event kept after the gap (event %d)", rf.Drops[0].Before)
	}
}

func TestCreateUnwritable(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(filepath.Join(dir, "no", "such", "dir", "tl.0"), Header{Size: 1}, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Create in a missing directory = %v, want ErrNotExist", err)
	}
	if os.Geteuid() != 0 { // root writes anywhere
		os.Chmod(dir, 0o500)
		defer os.Chmod(dir, 0o700)
		if _, err := Create(filepath.Join(dir, "tl.0"), Header{Size: 1}, 0); !errors.Is(err, os.ErrPermission) {
			t.Errorf("Create in a read-only directory = %v, want ErrPermission", err)
		}
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Add(&Event{Kind: KindOp})
	r.SetClock(1, 1)
	if r.Lane("x") != 0 || r.Close() != nil {
		t.Error("nil Recorder is not a no-op")
	}
}
