package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/trace"
)

// Every operation of every rank, of a Split communicator too, is on the
// rank's timeline with its name, sequence number, algorithm, bytes and a
// wait/reduce breakdown that fits in the span; user spans are there too.
func TestTimelineRecordsOperations(t *testing.T) {
	needObservable(t)
	base := filepath.Join(t.TempDir(), "tl")
	ctx := testCtx(t)
	cs, err := NewLocal(ctx, 2, WithTimeline(base), WithAlgorithm("allreduce:ring"))
	if err != nil {
		t.Fatal(err)
	}
	mustAll(t, "ops", onAll(cs, func(c *Comm) error {
		sp := c.StartSpan("compute", "forward", 7)
		time.Sleep(time.Millisecond)
		sp.End()
		v := make([]float32, 1<<16)
		for range 3 {
			if err := AllReduce(ctx, c, v, v, Sum); err != nil {
				return err
			}
		}
		if err := Broadcast(ctx, c, v[:10], 1); err != nil {
			return err
		}
		c.TraceInstant("compute", "mark", 3)
		sub, err := c.Split(ctx, 0, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		return sub.Barrier(ctx)
	}))
	for _, c := range cs {
		if !c.Tracing() {
			t.Fatal("Tracing() = false with a timeline")
		}
		c.Close()
	}
	for r := range 2 {
		rf, err := trace.ReadFile(fmt.Sprintf("%s.%d", base, r))
		if err != nil {
			t.Fatal(err)
		}
		if rf.Header.Rank != r || rf.Header.Size != 2 || !rf.Closed || rf.Dropped != 0 {
			t.Errorf("rank %d: header %+v closed %v dropped %d", r, rf.Header, rf.Closed, rf.Dropped)
		}
		var got []string
		for _, e := range rf.Events {
			got = append(got, fmt.Sprintf("%s/%s/%s#%d", rf.Lanes[e.Lane], kindName(e.Kind), e.Name, e.Seq))
			if e.Kind == trace.KindOp {
				if e.End < e.Start || e.Wait > e.End-e.Start || e.Reduce < 0 || e.Wait+e.Reduce > e.End-e.Start {
					t.Errorf("rank %d: %s #%d: span %d ns, wait %d, reduce %d", r, e.Name, e.Seq, e.End-e.Start, e.Wait, e.Reduce)
				}
			}
		}
		// Split's allgathers run on the parent, as operations 4 and 5.
		want := []string{"compute/span/forward#0",
			"comm/op/allreduce#0", "comm/op/allreduce#1", "comm/op/allreduce#2", "comm/op/broadcast#3",
			"compute/instant/mark#0", "comm/op/allgather#4", "comm/op/allgather#5", "comm 1/op/barrier#0"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("rank %d events\n got %v\nwant %v", r, got, want)
		}
		ar := rf.Events[1]
		if ar.Algo != "ring" || ar.Bytes != 4<<16 || ar.Reduce <= 0 || ar.Wait < 0 {
			t.Errorf("rank %d: allreduce %+v: want ring, 256 KiB, reduce time > 0, a first message", r, ar)
		}
		if sp := rf.Events[0]; sp.Arg != 7 || sp.End-sp.Start < int64(time.Millisecond) {
			t.Errorf("rank %d: span %+v", r, sp)
		}
	}
}

func kindName(k trace.Kind) string {
	return map[trace.Kind]string{trace.KindOp: "op", trace.KindSpan: "span", trace.KindInstant: "instant"}[k]
}

// An unwritable timeline fails at the start, naming the variable.
func TestTimelineUnwritable(t *testing.T) {
	needObservable(t)
	path := filepath.Join(t.TempDir(), "missing", "tl")
	_, err := NewLocal(context.Background(), 2, WithTimeline(path))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NewLocal with timeline %s = %v, want a not-exist error", path, err)
	}
	t.Log(err)
}

// With the timeline on, AllReduce still allocates nothing.
func TestTimelineAllocs(t *testing.T) {
	needObservable(t)
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cs := newLocal(t, 2, WithTimeline(filepath.Join(t.TempDir(), "tl")))
	step := allReduceStep(t, cs, 4096)
	step()
	if a := testing.AllocsPerRun(50, step); a > 0 {
		t.Errorf("%v allocations per AllReduce with the timeline on", a)
	}
}

// needObservable skips a test of the timeline or metrics in a build
// without them (-tags gorun_noobs, scripts/obs-cost.sh).
func needObservable(t testing.TB) {
	t.Helper()
	if !observable {
		t.Skip("built with -tags gorun_noobs")
	}
}

// A rank restarted by gorun --max-restarts (GORUN_RESTART=1) records to
// FILE.RANK.restart1, and its first incarnation's FILE.RANK stays as it
// was. Before, the restarted process truncated FILE.RANK: the events of
// the first incarnation were lost.
func TestTimelineRestartedRankFile(t *testing.T) {
	needObservable(t)
	base := filepath.Join(t.TempDir(), "tl")
	first := []byte(`{"k":"header","version":2,"rank":0,"size":2,"host":"h","pid":1,"restart":0,"clock":"monotonic"}` + "\n")
	if err := os.WriteFile(base+".0", first, 0o644); err != nil {
		t.Fatal(err)
	}
	old := osGetenv
	defer func() { osGetenv = old }()
	osGetenv = mapEnv(map[string]string{"GORUN_RESTART": "1"})
	cs := newLocal(t, 2, WithTimeline(base))
	osGetenv = old
	ctx := testCtx(t)
	mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
		v := make([]int32, 8)
		return AllReduce(ctx, c, v, v, Sum)
	}))
	for _, c := range cs {
		c.Close()
	}
	if b, err := os.ReadFile(base + ".0"); err != nil || string(b) != string(first) {
		t.Errorf("the first incarnation's file was changed: %q, %v", b, err)
	}
	for r := range 2 {
		rf, err := trace.ReadFile(trace.RestartPath(base, r, 1))
		if err != nil {
			t.Fatal(err)
		}
		if rf.Header.Rank != r || rf.Header.Restart != 1 || len(rf.Events) != 1 {
			t.Errorf("%s: header %+v, %d events; want rank %d, restart 1, 1 event", rf.Path, rf.Header, len(rf.Events), r)
		}
	}
}

// Each communicator's lane says which communicator it is: this rank, the
// size and an ID its members share and other communicators do not, also
// in one process (NewLocal), where every rank has the same pid. The
// report compares arrivals per communicator by it.
func TestTimelineNamesCommunicators(t *testing.T) {
	needObservable(t)
	base := filepath.Join(t.TempDir(), "tl")
	cs := newLocal(t, 4, WithTimeline(base))
	ctx := testCtx(t)
	mustAll(t, "split", onAll(cs, func(c *Comm) error {
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		return sub.Barrier(ctx)
	}))
	for _, c := range cs {
		c.Close()
	}
	var world, sub [4]trace.CommInfo
	for r := range 4 {
		rf, err := trace.ReadFile(trace.RestartPath(base, r, 0))
		if err != nil {
			t.Fatal(err)
		}
		if len(rf.Comms) != 2 || rf.Lanes[1] != "comm 1" {
			t.Fatalf("rank %d: lanes %q, communicators %+v; want comm and comm 1 described", r, rf.Lanes, rf.Comms)
		}
		world[r], sub[r] = rf.Comms[0], rf.Comms[1]
		if world[r].Rank != r || world[r].Size != 4 || sub[r].Rank != r/2 || sub[r].Size != 2 {
			t.Errorf("rank %d: world %+v, split %+v", r, world[r], sub[r])
		}
	}
	if world[0].ID != world[1].ID || world[0].ID != world[2].ID || world[0].ID != world[3].ID {
		t.Errorf("the world's members disagree on its ID: %+v", world)
	}
	if sub[0].ID != sub[2].ID || sub[1].ID != sub[3].ID || sub[0].ID == sub[1].ID || sub[0].ID == world[0].ID {
		t.Errorf("split IDs %+v: want {0,2} and {1,3} alike, the two different, and not the world's", sub)
	}
}

// A later first communicator of a rank in the same process (NewLocal
// again, a second Init after Close), while the first is open or after it
// closed, records to FILE.RANK.initN, and the first one's FILE.RANK stays:
// it truncated it, losing every event the first had written. ReadRanks
// reads the sessions as one rank, their lanes named "LANE (init N)".
func TestTimelineSecondFirstCommunicator(t *testing.T) {
	needObservable(t)
	base := filepath.Join(t.TempDir(), "tl")
	ctx := testCtx(t)
	allreduce := func(cs []*Comm, n int) {
		mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
			v := make([]int32, 8)
			for range n {
				if err := AllReduce(ctx, c, v, v, Sum); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	first := newLocal(t, 2, WithTimeline(base))
	allreduce(first, 1)
	second := newLocal(t, 2, WithTimeline(base)) // while the first is open
	allreduce(second, 2)
	for _, c := range append(first, second...) {
		c.Close()
	}
	third := newLocal(t, 2, WithTimeline(base)) // after both closed
	allreduce(third, 3)
	for _, c := range third {
		c.Close()
	}
	for r := range 2 {
		for n, want := range []int{1, 2, 3} {
			path := trace.SessionPath(trace.RestartPath(base, r, 0), n)
			rf, err := trace.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(rf.Events) != want || rf.Header.Init != n || !rf.Closed {
				t.Errorf("%s: %d events, header %+v, closed %v; want %d, init %d, closed", path, len(rf.Events), rf.Header, rf.Closed, want, n)
			}
		}
	}
	files, missing, err := trace.ReadRanks(base, 2)
	if err != nil || len(missing) > 0 || len(files) != 2 {
		t.Fatalf("ReadRanks: %d files, missing %v, %v", len(files), missing, err)
	}
	for _, rf := range files {
		var got []string
		for _, e := range rf.Events {
			got = append(got, rf.Lanes[e.Lane]+"/"+e.Name)
		}
		want := "[comm/allreduce comm (init 1)/allreduce comm (init 1)/allreduce comm (init 2)/allreduce comm (init 2)/allreduce comm (init 2)/allreduce]"
		if fmt.Sprint(got) != want || !rf.Closed || len(rf.Restarts) != 0 {
			t.Errorf("rank %d: events %v, closed %v, %d restarts; want %s, closed, none", rf.Header.Rank, got, rf.Closed, len(rf.Restarts), want)
		}
	}
	// Three communicators, each of its own session, all matched.
	if s := trace.Summarize(files); s.Comms != 3 || s.Matched != 6 || len(s.Restarted) > 0 {
		t.Errorf("report: %d communicators, %d collectives matched, restarted %v; want 3, 6, none\n%s", s.Comms, s.Matched, s.Restarted, s)
	}
	trace.Remove(files)
	if m, _ := filepath.Glob(base + ".*"); len(m) > 0 {
		t.Errorf("Remove left %v", m)
	}
}
