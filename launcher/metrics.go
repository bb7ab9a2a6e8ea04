package launcher

// gorun --metrics ADDR: one scrape target for the job. The ranks serve
// their counters on a free port (GORUN_METRICS_ADDR, comm/metrics.go) and
// report it over the job-control channel; a scrape of ADDR/metrics
// scrapes every rank at once and returns their series labelled rank="R",
// plus gorun_rank_up. Sums across ranks are the query's: sum by
// (collective) (gorun_collective_calls_total).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
	"github.com/gorun-hpc/gorun/internal/prom"
)

// scrapeTimeout bounds the scrape of one rank.
const scrapeTimeout = 2 * time.Second

type metricsServer struct {
	ln       net.Listener
	srv      *http.Server
	rankAddr string // the ranks' GORUN_METRICS_ADDR

	mu   sync.Mutex
	ctl  *jobctl.Server
	size int
}

func listenMetrics(addr string, remote bool) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --metrics: %v", ErrUsage, err)
	}
	m := &metricsServer{ln: ln, rankAddr: "127.0.0.1:0"}
	if remote {
		m.rankAddr = ":0" // reachable from here: every interface of the rank's host
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", m.serve)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(ln)
	return m, nil
}

func (o *obsRun) serveMetrics(srv *jobctl.Server) {
	if o.met != nil {
		o.met.mu.Lock()
		o.met.ctl, o.met.size = srv, o.size
		o.met.mu.Unlock()
	}
}

func (m *metricsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
}

func (m *metricsServer) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	ctl, size := m.ctl, m.size
	m.mu.Unlock()
	addrs := make([]string, size)
	if ctl != nil {
		for _, rs := range ctl.Snapshot().Ranks {
			if rs.Rank >= 0 && rs.Rank < size && !rs.Done {
				addrs[rs.Rank] = rs.MetricsAddr
			}
		}
	}
	sets := make([][]prom.Family, size)
	var wg sync.WaitGroup
	for rank, a := range addrs {
		if a == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if fams, err := scrape(r.Context(), a); err == nil {
				sets[rank] = prom.AddLabel(fams, prom.Label{Name: "rank", Value: strconv.Itoa(rank)})
			}
		}()
	}
	wg.Wait()
	up := prom.Family{Name: "gorun_rank_up", Type: "gauge", Help: "1 if the rank's metrics were scraped, 0 if not (not started, finished or unreachable)."}
	for rank, s := range sets {
		v := 0.0
		if s != nil {
			v = 1
		}
		up.Samples = append(up.Samples, prom.Sample{Labels: []prom.Label{{Name: "rank", Value: strconv.Itoa(rank)}}, Value: v})
	}
	w.Header().Set("Content-Type", prom.ContentType)
	prom.Write(w, prom.Merge(append(sets, []prom.Family{up})...))
}

func scrape(ctx context.Context, addr string) ([]prom.Family, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	return prom.Parse(resp.Body)
}
