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
