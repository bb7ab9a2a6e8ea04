package comm

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/gorun-hpc/gorun/internal/prom"
)

// A rank's /metrics parses as Prometheus text and counts what it ran:
// calls, bytes and time per collective and algorithm, errors by kind, and
// the provider's refusals.
func TestMetricsEndpoint(t *testing.T) {
	needObservable(t)
	t.Setenv("GORUN_METRICS_ADDR", "127.0.0.1:0")
	cs := newLocal(t, 2, WithTransport("tcp"), WithAlgorithm("allreduce:ring"))
	ctx := testCtx(t)
	mustAll(t, "ops", onAll(cs, func(c *Comm) error {
		v := make([]float64, 100)
		for range 3 {
			if err := AllReduce(ctx, c, v, v, Sum); err != nil {
				return err
			}
		}
		return c.Barrier(ctx)
	}))
	// A mismatch: every rank fails it and counts it.
	mismatchAll(ctx, t, cs)
	for r, c := range cs {
		resp, err := http.Get("http://" + c.cfg.obs.met.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != prom.ContentType {
			t.Errorf("Content-Type %q", ct)
		}
		fams, err := prom.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("rank %d: /metrics does not parse: %v", r, err)
		}
		ring := []prom.Label{{Name: "collective", Value: "allreduce"}, {Name: "algorithm", Value: "ring"}}
		for _, c := range []struct {
			name   string
			labels []prom.Label
			want   float64
		}{
			{"gorun_collective_calls_total", ring, 4},
			{"gorun_collective_bytes_total", ring, 3*800 + float64(4*(4+r))},
			{"gorun_collective_calls_total", []prom.Label{{Name: "collective", Value: "barrier"}}, 1},
			{"gorun_errors_total", []prom.Label{{Name: "kind", Value: "mismatch"}}, 1},
			{"gorun_errors_total", []prom.Label{{Name: "kind", Value: "timeout"}}, 0},
			{"gorun_reconnects_total", nil, 0},
			{"gorun_refused_connections_total", []prom.Label{{Name: "provider", Value: "tcp"}}, 0},
			{"gorun_refused_remote_accesses_total", []prom.Label{{Name: "provider", Value: "tcp"}}, 0},
		} {
			if got, ok := prom.Get(fams, c.name, c.labels...); !ok || got != c.want {
				t.Errorf("rank %d: %s%v = %v (present %v), want %v", r, c.name, c.labels, got, ok, c.want)
			}
		}
		if s, ok := prom.Get(fams, "gorun_collective_seconds_total", ring...); !ok || s <= 0 {
			t.Errorf("rank %d: allreduce seconds %v", r, s)
		}
	}
	if cs[0].Tracing() {
		t.Error("Tracing() with metrics only")
	}
}

// An operation called on a communicator that has already failed fails at
// once, before it runs; it is still a failed operation and counted as
// one, whatever the path (a collective, a Send, a group of ISend and
// IRecv). The launcher's TestEndToEndMetricsAfterShrink lost its count
// when a survivor learnt of a rank's death between two operations.
func TestMetricsCountOperationsFailedBeforeTheyRun(t *testing.T) {
	needObservable(t)
	t.Setenv("GORUN_METRICS_ADDR", "127.0.0.1:0")
	cs := newLocal(t, 2, WithTransport("tcp"))
	ctx := testCtx(t)
	mismatchAll(ctx, t, cs)
	for r, c := range cs {
		v := make([]float32, 4)
		if err := AllReduce(ctx, c, v, v, Sum); !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: allreduce after the failure = %v, want the mismatch", r, err)
		}
		if err := Send(ctx, c, v, 1-r, 0); !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: send after the failure = %v, want the mismatch", r, err)
		}
		s, rv := ISend(ctx, c, v, 1-r, 0), IRecv(ctx, c, make([]float32, 4), 1-r, 0)
		if err := WaitAll(ctx, s, rv); !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: isend and irecv after the failure = %v, want the mismatch", r, err)
		}
		resp, err := http.Get("http://" + c.cfg.obs.met.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		fams, err := prom.Parse(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("rank %d: /metrics does not parse: %v", r, err)
		}
		if got, _ := prom.Get(fams, "gorun_errors_total", prom.Label{Name: "kind", Value: "mismatch"}); got != 4 {
			t.Errorf("rank %d: %v mismatches counted, want 4 (the allreduce that failed, then an allreduce, a send and a group that could not run)", r, got)
		}
	}
}

// mismatchAll runs an allreduce whose ranks pass different counts, and
// fails the test unless every rank fails it with ErrMismatch.
func mismatchAll(ctx context.Context, t *testing.T, cs []*Comm) {
	t.Helper()
	errs := onAll(cs, func(c *Comm) error {
		return AllReduce(ctx, c, make([]float32, 4+c.Rank()), make([]float32, 4+c.Rank()), Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: mismatched allreduce = %v", r, err)
		}
	}
}
