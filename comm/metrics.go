package comm

// Live metrics (GORUN_METRICS_ADDR): counters kept by the observer
// (observe.go) and served as Prometheus text (internal/prom, written by
// hand: see its package comment) at http://ADDR/metrics. They cost
// nothing when off: the communicator's obs is nil.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
	"github.com/gorun-hpc/gorun/internal/prom"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

const (
	maxColls = 32 // above collectives' count, with room for more
	maxAlgos = 16
)

// errKinds name the errors counted, in classify's order.
var errKinds = [...]string{"mismatch", "timeout", "peer_failed", "peer_closed", "aborted", "invalid", "closed", "device_failed", "other"}

func classify(err error) int {
	for i, e := range []error{ErrMismatch, ErrTimeout, ErrPeerFailed, ErrPeerClosed, ErrAborted, ErrInvalid, ErrClosed, ErrDeviceFailed} {
		if errors.Is(err, e) {
			return i
		}
	}
	return len(errKinds) - 1
}

// metrics are one process's counters and their HTTP server.
type metrics struct {
	calls, bytes, nanos [maxColls][maxAlgos]atomic.Uint64
	errs                [len(errKinds)]atomic.Uint64
	reconnects          atomic.Uint64
	// devs lists the devices whose refusals are reported (the first
	// communicator's, shared by those made from it).
	devs atomic.Pointer[[]*engine.Device]

	ln  net.Listener
	srv *http.Server
}

// listenMetrics serves m on addr; a non-zero port is offset by slot (the
// rank's place on its host), so that ranks sharing a host do not collide.
func listenMetrics(addr string, slot int) (*metrics, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("gorun: GORUN_METRICS_ADDR=%s: want host:port", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("gorun: GORUN_METRICS_ADDR=%s: bad port", addr)
	}
	if p != 0 {
		p += slot
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
	if err != nil {
		return nil, fmt.Errorf("gorun: GORUN_METRICS_ADDR=%s: %w", addr, err)
	}
	m := &metrics{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", prom.ContentType)
		prom.Write(w, m.families())
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(ln)
	return m, nil
}

// Addr is where the metrics are served.
func (m *metrics) Addr() net.Addr { return m.ln.Addr() }

func (m *metrics) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
}

// op counts one operation that ran; its error, if any, is counted by
// failed.
func (m *metrics) op(coll collectives.Collective, algo collectives.Algo, bytes int, d int64) {
	c, a := int(coll)%maxColls, int(algo)%maxAlgos
	m.calls[c][a].Add(1)
	m.bytes[c][a].Add(uint64(bytes))
	m.nanos[c][a].Add(uint64(d))
}

// countFailure counts c's failed operation by its kind (failed).
func (c *Comm) countFailure(err error) {
	if observable && c.obs != nil && c.obs.o.met != nil {
		c.obs.o.met.errs[classify(err)].Add(1)
	}
}

func (m *metrics) families() []prom.Family {
	calls := prom.Family{Name: "gorun_collective_calls_total", Type: "counter", Help: "Operations run, by collective and algorithm."}
	bytes := prom.Family{Name: "gorun_collective_bytes_total", Type: "counter", Help: "Bytes of the operations' buffers, by collective and algorithm."}
	secs := prom.Family{Name: "gorun_collective_seconds_total", Type: "counter", Help: "Time spent in operations, by collective and algorithm."}
	for c := range maxColls {
		for a := range maxAlgos {
			n := m.calls[c][a].Load()
			if n == 0 {
				continue
			}
			ls := []prom.Label{{Name: "collective", Value: collectives.Collective(c).String()}, {Name: "algorithm", Value: collectives.Algo(a).String()}}
			calls.Samples = append(calls.Samples, prom.Sample{Labels: ls, Value: float64(n)})
			bytes.Samples = append(bytes.Samples, prom.Sample{Labels: ls, Value: float64(m.bytes[c][a].Load())})
			secs.Samples = append(secs.Samples, prom.Sample{Labels: ls, Value: float64(m.nanos[c][a].Load()) / 1e9})
		}
	}
	errs := prom.Family{Name: "gorun_errors_total", Type: "counter", Help: "Failed operations, by kind of error."}
	for i, k := range errKinds {
		errs.Samples = append(errs.Samples, prom.Sample{Labels: []prom.Label{{Name: "kind", Value: k}}, Value: float64(m.errs[i].Load())})
	}
	rec := prom.Family{Name: "gorun_reconnects_total", Type: "counter", Help: "Connections made after the first world formed (Shrink).",
		Samples: []prom.Sample{{Value: float64(m.reconnects.Load())}}}
	auth := prom.Family{Name: "gorun_refused_connections_total", Type: "counter", Help: "Handshakes refused for a wrong or missing job token, by provider."}
	access := prom.Family{Name: "gorun_refused_remote_accesses_total", Type: "counter", Help: "Remote memory accesses refused (unknown key, out of bounds, access not granted), by provider."}
	if devs := m.devs.Load(); devs != nil {
		for _, d := range *devs {
			cs, ok := d.Dev.(rdma.CounterSource)
			if !ok {
				continue
			}
			n := cs.Counters()
			ls := []prom.Label{{Name: "provider", Value: d.Dev.Name()}}
			auth.Samples = append(auth.Samples, prom.Sample{Labels: ls, Value: float64(n.AuthFailures)})
			access.Samples = append(access.Samples, prom.Sample{Labels: ls, Value: float64(n.AccessViolations)})
		}
	}
	return []prom.Family{calls, bytes, secs, errs, rec, auth, access}
}
