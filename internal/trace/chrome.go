package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ReadRanks reads base.0, base.1, ... for a job of size ranks (size ≤ 0:
// as many as the files' headers say), each with its restarted
// incarnations' files (base.R.restartN, RankFile.Restarts). A rank
// without events to read (no file: it never started its timeline; an
// empty one: it was killed or exited before its first flush) is skipped
// and reported in missing; so the timeline of a job where some ranks died
// still merges. It fails only when no rank left a timeline, or a file is
// not one.
func ReadRanks(base string, size int) (files []*RankFile, missing []int, err error) {
	if size <= 0 {
		size = guessSize(base)
	}
	restarts := restartsOf(base)
	for r := range size {
		var first *RankFile
		var empty []string
		for _, n := range append([]int{0}, restarts[r]...) {
			path := RestartPath(base, r, n)
			rf, none, err := readSessions(path)
			empty = append(empty, none...)
			if os.IsNotExist(err) {
				continue
			}
			if errors.Is(err, ErrEmpty) {
				empty = append(empty, path)
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			if rf.Header.Rank != r {
				return nil, nil, fmt.Errorf("%s holds rank %d", rf.Path, rf.Header.Rank)
			}
			rf.Header.Restart = n
			if first == nil {
				first = rf
			} else {
				first.Restarts = append(first.Restarts, rf)
			}
		}
		if first == nil {
			missing = append(missing, r)
			continue
		}
		// An incarnation that ended before writing an event (a header
		// only) is passed over when another one of the rank has events.
		incs := first.Incarnations()
		var written []*RankFile
		for _, inc := range incs {
			if len(inc.Events) > 0 {
				written = append(written, inc)
			}
		}
		if len(written) > 0 && len(written) < len(incs) {
			for _, inc := range incs {
				if len(inc.Events) == 0 {
					empty = append(empty, inc.Path)
				}
			}
			incs = written
		}
		first = incs[0]
		first.Restarts = incs[1:]
		first.empty = empty
		files = append(files, first)
	}
	if len(files) == 0 {
		return nil, missing, fmt.Errorf("no timeline in %s.N (%d ranks)", base, size)
	}
	return files, missing, nil
}

// restartsOf lists, per rank, the restart numbers of the files
// base.R.restartN, in order.
func restartsOf(base string) map[int][]int {
	ents, _ := os.ReadDir(filepath.Dir(base))
	prefix := filepath.Base(base) + "."
	out := map[int][]int{}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		rs, ns, ok2 := strings.Cut(rest, restartSuffix)
		if !ok || !ok2 {
			continue
		}
		r, err1 := strconv.Atoi(rs)
		n, err2 := strconv.Atoi(ns)
		if err1 == nil && err2 == nil && r >= 0 && n > 0 && RestartPath(base, r, n) == filepath.Join(filepath.Dir(base), e.Name()) {
			out[r] = append(out[r], n)
		}
	}
	for _, ns := range out {
		sort.Ints(ns)
	}
	return out
}

// guessSize is the job size the first readable file of base.N states, or
// 1 + the largest N when none can be read.
func guessSize(base string) int {
	ents, _ := os.ReadDir(filepath.Dir(base))
	prefix := filepath.Base(base) + "."
	var ranks []int
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), prefix)
		if r, err := strconv.Atoi(n); ok && err == nil && r >= 0 {
			ranks = append(ranks, r)
		}
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		if rf, err := ReadFile(base + "." + strconv.Itoa(r)); err == nil {
			return rf.Header.Size
		}
	}
	if len(ranks) == 0 {
		return 1
	}
	return ranks[len(ranks)-1] + 1
}

// Remove deletes the per-rank files of files, their restarted
// incarnations' and the empty ones ReadRanks passed over beside them.
func Remove(files []*RankFile) {
	for _, f := range files {
		for _, inc := range f.Incarnations() {
			if inc.Path != "" {
				os.Remove(inc.Path)
			}
		}
		for _, inc := range f.Incarnations() {
			for _, p := range inc.sessions {
				os.Remove(p)
			}
		}
		for _, p := range f.empty {
			os.Remove(p)
		}
	}
}

// chromeEvent is one event of the Trace Event Format
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// Shift is the time a rank's event is at on the common (launcher) clock.
func (rf *RankFile) Shift(t int64) int64 { return t + rf.Offset }

// Origin is the earliest corrected time of files' events.
func Origin(files []*RankFile) int64 {
	first := int64(0)
	seen := false
	for _, rf := range files {
		for _, f := range rf.Incarnations() {
			for i := range f.Events {
				if t := f.Shift(f.Events[i].Start); !seen || t < first {
					first, seen = t, true
				}
			}
		}
	}
	return first
}

// Merge writes files as one Chrome Trace Event Format JSON object: one
// process per rank ("rank R"), one thread per lane, times in µs from the
// earliest event, each rank's clock corrected by its offset. A restarted
// rank's later incarnations are threads of the same process, after the
// first's, named "LANE (restart N)", with an instant where each begins. Operations
// are complete events with their breakdown as args and two children:
// "wait" (until the first peer message) and "transfer" (the rest, with
// reductions).
func Merge(w io.Writer, files []*RankFile) error {
	origin := Origin(files)
	us := func(f *RankFile, t int64) float64 { return float64(f.Shift(t)-origin) / 1e3 }
	dur := func(d int64) *float64 { v := float64(d) / 1e3; return &v }
	var out []chromeEvent
	for _, rf := range files {
		pid := rf.Header.Rank
		name := "rank " + strconv.Itoa(pid)
		if rf.Header.Host != "" {
			name += " (" + rf.Header.Host + ")"
		}
		out = append(out,
			chromeEvent{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": name}},
			chromeEvent{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
		for _, f := range rf.Incarnations() {
			out = mergeIncarnation(out, f, pid, len(files) > 1, us, dur)
		}
	}
	// Stable order: by process, thread, then time (metadata first).
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		if (a.Ph == "M") != (b.Ph == "M") {
			return a.Ph == "M"
		}
		return a.TS < b.TS
	})
	bw := bufio.NewWriter(w)
	bw.WriteString(`{"displayTimeUnit":"ns","otherData":{"producer":"gorun"},"traceEvents":[` + "\n")
	for i := range out {
		b, err := json.Marshal(&out[i])
		if err != nil {
			return err
		}
		bw.Write(b)
		if i < len(out)-1 {
			bw.WriteString(",\n")
		}
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}

// mergeIncarnation appends f's events to out as process pid's: restart
// N's lanes are threads N<<16 + lane.
func mergeIncarnation(out []chromeEvent, f *RankFile, pid int, several bool,
	us func(*RankFile, int64) float64, dur func(int64) *float64) []chromeEvent {
	restart := f.Header.Restart
	base := restart << 16
	for lane, ln := range f.Lanes {
		if restart > 0 {
			ln += fmt.Sprintf(" (restart %d)", restart)
		}
		out = append(out, chromeEvent{Name: "thread_name", Ph: "M", PID: pid, TID: base + lane, Args: map[string]any{"name": ln}},
			chromeEvent{Name: "thread_sort_index", Ph: "M", PID: pid, TID: base + lane, Args: map[string]any{"sort_index": base + lane}})
	}
	if f.RTT == 0 && several {
		name := "clock offset not measured"
		if restart > 0 {
			name += fmt.Sprintf(" (restart %d)", restart)
		}
		out = append(out, chromeEvent{Name: name, Ph: "i", S: "p", PID: pid, TS: 0})
	}
	if restart > 0 && len(f.Events) > 0 {
		out = append(out, chromeEvent{Name: fmt.Sprintf("restarted (%d)", restart), Ph: "i", S: "p", PID: pid, TID: base,
			TS: us(f, f.Events[0].Start)})
	}
	d := 0
	for i := range f.Events {
		e := &f.Events[i]
		tid := base + int(e.Lane)
		for ; d < len(f.Drops) && f.Drops[d].Before <= i; d++ {
			out = append(out, chromeEvent{Name: fmt.Sprintf("%d events dropped (the writer fell behind)", f.Drops[d].N),
				Ph: "i", S: "p", PID: pid, TID: tid, TS: us(f, e.Start)})
		}
		ce := chromeEvent{Name: e.Name, PID: pid, TID: tid, TS: us(f, e.Start)}
		switch e.Kind {
		case KindOp:
			ce.Cat, ce.Ph, ce.Dur = "collective", "X", dur(e.End-e.Start)
			total := e.End - e.Start
			wait := max(e.Wait, 0)
			ce.Args = map[string]any{"seq": e.Seq, "algo": e.Algo, "bytes": e.Bytes,
				"wait_us": float64(wait) / 1e3, "reduce_us": float64(e.Reduce) / 1e3,
				"transfer_us": float64(total-wait-e.Reduce) / 1e3}
			if e.Name == "send" || e.Name == "recv" {
				ce.Args["peer"] = e.Arg
			}
			if e.Err {
				ce.Args["error"] = true
			}
			out = append(out, ce)
			if e.Wait > 0 && e.Wait <= total {
				out = append(out, chromeEvent{Name: "wait", Cat: "collective", Ph: "X", PID: pid, TID: tid,
					TS: us(f, e.Start), Dur: dur(e.Wait)},
					chromeEvent{Name: "transfer", Cat: "collective", Ph: "X", PID: pid, TID: tid,
						TS: us(f, e.Start+e.Wait), Dur: dur(total - e.Wait), Args: map[string]any{"reduce_us": float64(e.Reduce) / 1e3}})
			}
			continue
		case KindSpan:
			ce.Cat, ce.Ph, ce.Dur = "span", "X", dur(e.End-e.Start)
		default:
			ce.Cat, ce.Ph, ce.S = "instant", "i", "t"
		}
		ce.Args = map[string]any{"arg": e.Arg}
		out = append(out, ce)
	}
	return out
}

// MergeFile reads base.N for size ranks and writes the merged trace to
// out. It returns the files read and the ranks without a file.
func MergeFile(base string, size int, out string) ([]*RankFile, []int, error) {
	files, missing, err := ReadRanks(base, size)
	if err != nil {
		return nil, missing, err
	}
	f, err := os.Create(out)
	if err != nil {
		return files, missing, err
	}
	if err := Merge(f, files); err != nil {
		f.Close()
		return files, missing, err
	}
	return files, missing, f.Close()
}
