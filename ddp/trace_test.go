package ddp

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/internal/trace"
)

// With a timeline, each gradient marked ready is an instant and each
// bucket's allreduce a span on its own row, from its launch to the end of
// the allreduce it started.
func TestTimelineBuckets(t *testing.T) {
	base := filepath.Join(t.TempDir(), "tl")
	const steps = 3
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		ps := params(16, 16, 16)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 64, BucketBytes: 128})
		if err != nil {
			return err
		}
		for range steps {
			for i := len(ps) - 1; i >= 0; i-- {
				if err := b.MarkReady(ctx, i); err != nil {
					return err
				}
			}
			if err := b.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}, comm.WithTimeline(base))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 2 {
		rf, err := trace.ReadFile(fmt.Sprintf("%s.%d", base, r))
		if err != nil {
			t.Fatal(err)
		}
		var ready int
		var ops, buckets []trace.Event
		for _, e := range rf.Events {
			switch {
			case e.Kind == trace.KindInstant && rf.Lanes[e.Lane] == "ddp" && e.Name == "grad ready":
				ready++
			case e.Kind == trace.KindOp && e.Name == "allreduce":
				ops = append(ops, e)
			case e.Kind == trace.KindSpan && e.Name == "bucket allreduce":
				if want := fmt.Sprintf("ddp bucket %d", e.Arg); rf.Lanes[e.Lane] != want {
					t.Errorf("rank %d: bucket %d on row %q, want %q", r, e.Arg, rf.Lanes[e.Lane], want)
				}
				buckets = append(buckets, e)
			}
		}
		if ready != 3*steps || len(ops) != 2*steps || len(buckets) != 2*steps {
			t.Fatalf("rank %d: %d grad ready, %d allreduces, %d bucket spans; want %d, %d, %d", r, ready, len(ops), len(buckets), 3*steps, 2*steps, 2*steps)
		}
		// Each allreduce lies within a bucket span (they were started in order).
		for _, op := range ops {
			found := false
			for _, bk := range buckets {
				found = found || bk.Start <= op.Start && op.End <= bk.End
			}
			if !found {
				t.Errorf("rank %d: allreduce #%d [%d, %d] is in no bucket span", r, op.Seq, op.Start, op.End)
			}
		}
	}
}

// Two Bucketers, each on its own communicator as the package comment
// asks, draw their buckets on rows of their own: "ddp bucket N" for the
// world communicator's, "ddp bucket N (comm 1)" for the other's, and the
// spans on each row do not overlap. Before, both used "ddp bucket N",
// whose spans then overlapped without nesting (a malformed row in
// Perfetto) whenever the two allreduces were in flight together.
func TestTimelineTwoBucketers(t *testing.T) {
	base := filepath.Join(t.TempDir(), "tl")
	const steps = 3
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		c2, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		defer c2.Close()
		if c.TraceLane() != "comm" || c2.TraceLane() != "comm 1" {
			return fmt.Errorf("trace lanes %q and %q, want comm and comm 1", c.TraceLane(), c2.TraceLane())
		}
		p1, p2 := params(16, 16), params(16, 16)
		b1, err := NewBucketer(c, p1, Config{FirstBucketBytes: 64, BucketBytes: 64})
		if err != nil {
			return err
		}
		b2, err := NewBucketer(c2, p2, Config{FirstBucketBytes: 64, BucketBytes: 64})
		if err != nil {
			return err
		}
		for range steps {
			for i := 1; i >= 0; i-- {
				if err := b1.MarkReady(ctx, i); err != nil {
					return err
				}
				if err := b2.MarkReady(ctx, i); err != nil {
					return err
				}
			}
			if err := errors.Join(b1.Wait(ctx), b2.Wait(ctx)); err != nil {
				return err
			}
		}
		return nil
	}, comm.WithTimeline(base))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 2 {
		rf, err := trace.ReadFile(fmt.Sprintf("%s.%d", base, r))
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string][]trace.Event{}
		ready := map[string]int{}
		for _, e := range rf.Events {
			switch {
			case e.Kind == trace.KindSpan && e.Name == "bucket allreduce":
				rows[rf.Lanes[e.Lane]] = append(rows[rf.Lanes[e.Lane]], e)
			case e.Kind == trace.KindInstant && e.Name == "grad ready":
				ready[rf.Lanes[e.Lane]]++
			}
		}
		for _, row := range []string{"ddp bucket 0", "ddp bucket 1", "ddp bucket 0 (comm 1)", "ddp bucket 1 (comm 1)"} {
			if len(rows[row]) != steps {
				t.Errorf("rank %d: %d spans on row %q, want %d (rows %v)", r, len(rows[row]), row, steps, keys(rows))
			}
		}
		if ready["ddp"] != 2*steps || ready["ddp (comm 1)"] != 2*steps {
			t.Errorf("rank %d: grad ready instants by row %v, want %d on ddp and on ddp (comm 1)", r, ready, 2*steps)
		}
		for row, spans := range rows {
			for i := range spans {
				for _, b := range spans[i+1:] {
					if a := spans[i]; b.Start < a.End && a.Start < b.End {
						t.Errorf("rank %d: row %q: spans [%d, %d] and [%d, %d] overlap", r, row, a.Start, a.End, b.Start, b.End)
					}
				}
			}
		}
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// With the timeline on, Wait returns when its context ends, as without
// it, though the bucket's allreduce (and its span, which ends with it)
// runs under MarkReady's longer context: Wait aborts the communicator,
// which ends the allreduce, and rank 1's later collectives fail naming
// rank 0.
// Before, Wait waited for the spans and so for the allreduce: here until
// MarkReady's context ended.
func TestWaitHonoursContextWithTimeline(t *testing.T) {
	late := make(chan struct{}) // rank 1 takes part once rank 0's Wait has returned
	// Rank 0 returns, cancelling MarkReady's context, under which the
	// allreduce runs, once rank 1 is done with it.
	done := make(chan struct{})
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		r := c.Rank()
		ps := params(16)
		b, err := NewBucketer(c, ps, Config{})
		if err != nil {
			return err
		}
		if r == 1 {
			defer close(done)
			<-late
			if err := b.MarkReady(ctx, 0); err != nil {
				return err
			}
			return failsNaming0(ctx, c, b.Wait(ctx))
		}
		mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
		defer mcancel()
		if err := b.MarkReady(mctx, 0); err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer wcancel()
		t0 := time.Now()
		err = b.Wait(wctx)
		d := time.Since(t0)
		close(late)
		<-done
		if !errors.Is(err, context.DeadlineExceeded) || d > 10*time.Second {
			return fmt.Errorf("Wait with a 100ms context returned %v after %v, want its deadline at once", err, d)
		}
		return nil
	}, comm.WithTimeline(filepath.Join(t.TempDir(), "tl")))
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Join is a span on the "ddp" row of the rank that joined, and the
// allreduces of zeros it makes in the others' steps are bucket spans
// inside it, as a training rank's are.
func TestTimelineJoin(t *testing.T) {
	base := filepath.Join(t.TempDir(), "tl")
	const steps = 2
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		r := c.Rank()
		ps := params(16, 16)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 64, BucketBytes: 64, UnevenInputs: true})
		if err != nil {
			return err
		}
		if r == 0 {
			for range steps {
				if err := step(ctx, b, ps); err != nil {
					return err
				}
			}
		}
		_, err = b.Join(ctx)
		return err
	}, comm.WithTimeline(base))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	rf, err := trace.ReadFile(base + ".1")
	if err != nil {
		t.Fatal(err)
	}
	var joins, buckets []trace.Event
	for _, e := range rf.Events {
		switch {
		case e.Kind == trace.KindSpan && e.Name == "join" && rf.Lanes[e.Lane] == "ddp":
			joins = append(joins, e)
		case e.Kind == trace.KindSpan && e.Name == "bucket allreduce":
			buckets = append(buckets, e)
		}
	}
	if len(joins) != 1 || len(buckets) != 2*steps {
		t.Fatalf("%d join spans and %d bucket spans, want 1 and %d", len(joins), len(buckets), 2*steps)
	}
	for _, bk := range buckets {
		if bk.Start < joins[0].Start || bk.End > joins[0].End {
			t.Errorf("bucket span [%d, %d] outside the join span [%d, %d]", bk.Start, bk.End, joins[0].Start, joins[0].End)
		}
	}
}
