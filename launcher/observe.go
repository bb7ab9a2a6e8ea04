package launcher

// Observability: --timeline, --report (and GORUN_REPORT). The ranks
// record their timelines (internal/trace, comm) to BASE.RANK; at the end
// gorun merges them into the --timeline file and prints the report.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-hpc/gorun/internal/jobctl"
	"github.com/gorun-hpc/gorun/internal/trace"
)

// obsRun is one job's observability state.
type obsRun struct {
	size     int
	timeline string // the merged file (absolute), or ""
	report   bool
	base     string // the ranks' GORUN_TIMELINE, or ""
	tmp      string // a directory to remove, or ""
	met      *metricsServer
}

// startObs checks the paths before any rank starts: an unwritable
// timeline fails now, not at the end of a long job.
func startObs(cfg Config, remote bool) (*obsRun, error) {
	o := &obsRun{size: cfg.NP, report: cfg.Report}
	if cfg.Metrics != "" {
		var err error
		if o.met, err = listenMetrics(cfg.Metrics, remote); err != nil {
			return nil, err
		}
	}
	if cfg.Timeline != "" {
		abs, err := filepath.Abs(cfg.Timeline)
		if err != nil {
			return nil, fmt.Errorf("%w: --timeline %s: %v", ErrUsage, cfg.Timeline, err)
		}
		f, err := os.Create(abs)
		if err != nil {
			o.cleanup()
			return nil, fmt.Errorf("%w: --timeline: %v", ErrUsage, err)
		}
		f.Close()
		o.timeline, o.base = abs, abs
	}
	if o.report && o.base == "" {
		dir, err := os.MkdirTemp("", "gorun-report-")
		if err != nil {
			o.cleanup()
			return nil, fmt.Errorf("%w: --report: %v", ErrLaunch, err)
		}
		o.tmp, o.base = dir, filepath.Join(dir, "timeline")
	}
	return o, nil
}

// vars are the variables ranks get.
func (o *obsRun) vars() []string {
	var v []string
	if o.base != "" {
		v = append(v, EnvTimeline+"="+o.base)
	}
	if o.met != nil {
		v = append(v, EnvMetricsAddr+"="+o.met.rankAddr)
	}
	return v
}

// finish merges the timeline and prints the report (whatever the job's
// outcome: a failed job's timeline is the one most wanted).
func (o *obsRun) finish(con *console) {
	if o.base == "" {
		return
	}
	files, missing, err := trace.ReadRanks(o.base, o.size)
	for _, r := range missing { // the empty files of ranks that wrote nothing
		os.Remove(o.base + "." + strconv.Itoa(r))
	}
	if err != nil {
		con.message(fmt.Sprintf("gorun: timeline: %v", err))
		return
	}
	// Notes: the ranks without events (no file, an empty one, or only a
	// header: they ended before their first flush), then the others' gaps.
	// Of a rank that gorun restarted (--max-restarts), whether it closed
	// its communicator, and whether its file ends in a cut line, are its
	// last incarnation's: the earlier ones ended by failing; its dropped
	// events are all of them.
	silent := append([]int(nil), missing...)
	var open, cut, restarted []int
	var notes []string
	for _, f := range files {
		incs := f.Incarnations()
		last := incs[len(incs)-1]
		switch {
		case len(f.Events) == 0:
			silent = append(silent, f.Header.Rank)
		case !last.Closed:
			open = append(open, f.Header.Rank)
		}
		if len(incs) > 1 {
			restarted = append(restarted, f.Header.Rank)
		}
		if last.Truncated {
			cut = append(cut, f.Header.Rank)
		}
		var dropped uint64
		for _, inc := range incs {
			dropped += inc.Dropped
		}
		if dropped > 0 {
			notes = append(notes, fmt.Sprintf("rank %d dropped %d events", f.Header.Rank, dropped))
		}
	}
	slices.Sort(silent)
	if len(silent) > 0 {
		notes = append(notes, fmt.Sprintf("no events from %s (ended before writing any)", rankWord(silent)))
	}
	if len(restarted) > 0 {
		notes = append(notes, fmt.Sprintf("%s restarted (each rank's incarnations are one process)", rankWord(restarted)))
	}
	if len(open) > 0 {
		notes = append(notes, fmt.Sprintf("%s did not close the communicator (the last second of events may be missing)", rankWord(open)))
	}
	if len(cut) > 0 {
		notes = append(notes, fmt.Sprintf("the file of %s ends in a cut line (left out)", rankWord(cut)))
	}
	if o.timeline != "" {
		out, err := os.Create(o.timeline)
		if err == nil {
			err = trace.Merge(out, files)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			con.message(fmt.Sprintf("gorun: timeline %s: %v", o.timeline, err))
			return
		}
		trace.Remove(files)
		msg := fmt.Sprintf("gorun: timeline: %s (%d ranks; open it in https://ui.perfetto.dev or chrome://tracing)", o.timeline, len(files))
		if len(notes) > 0 {
			msg += "; " + strings.Join(notes, "; ")
		}
		con.message(msg)
	}
	if o.report {
		con.message(strings.TrimSuffix(trace.Summarize(files).String(), "\n"))
	}
}

// rankWord is "rank 3" or "ranks 0,2-4".
func rankWord(ranks []int) string {
	if len(ranks) == 1 {
		return "rank " + strconv.Itoa(ranks[0])
	}
	return "ranks " + jobctl.RankList(ranks)
}

func (o *obsRun) cleanup() {
	if o.met != nil {
		o.met.close()
	}
	if o.tmp != "" {
		os.RemoveAll(o.tmp)
	}
}
