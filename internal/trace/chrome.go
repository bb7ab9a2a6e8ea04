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
// as many as the files' headers say). A rank without events to read (no
// file: it never started its timeline; an empty one: it was killed or
// exited before its first flush) is skipped and reported in missing; so
// the timeline of a job where some ranks died still merges. It fails
// only when no rank left a timeline, or a file is not one.
func ReadRanks(base string, size int) (files []*RankFile, missing []int, err error) {
	if size <= 0 {
		size = guessSize(base)
	}
	for r := range size {
		rf, err := ReadFile(base + "." + strconv.Itoa(r))
		if os.IsNotExist(err) || errors.Is(err, ErrEmpty) {
			missing = append(missing, r)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if rf.Header.Rank != r {
			return nil, nil, fmt.Errorf("%s holds rank %d", rf.Path, rf.Header.Rank)
		}
		files = append(files, rf)
	}
	if len(files) == 0 {
		return nil, missing, fmt.Errorf("no timeline in %s.N (%d ranks)", base, size)
	}
	return files, missing, nil
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

// Remove deletes the per-rank files of files.
func Remove(files []*RankFile) {
	for _, f := range files {
		if f.Path != "" {
			os.Remove(f.Path)
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
	for _, f := range files {
		for i := range f.Events {
			if t := f.Shift(f.Events[i].Start); !seen || t < first {
				first, seen = t, true
			}
		}
	}
	return first
}

// Merge writes files as one Chrome Trace Event Format JSON object: one
// process per rank ("rank R"), one thread per lane, times in µs from the
// earliest event, each rank's clock corrected by its offset. Operations
// are complete events with their breakdown as args and two children:
// "wait" (until the first peer message) and "transfer" (the rest, with
// reductions).
func Merge(w io.Writer, files []*RankFile) error {
	origin := Origin(files)
	us := func(f *RankFile, t int64) float64 { return float64(f.Shift(t)-origin) / 1e3 }
	dur := func(d int64) *float64 { v := float64(d) / 1e3; return &v }
	var out []chromeEvent
	for _, f := range files {
		pid := f.Header.Rank
		name := "rank " + strconv.Itoa(pid)
		if f.Header.Host != "" {
			name += " (" + f.Header.Host + ")"
		}
		out = append(out,
			chromeEvent{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": name}},
			chromeEvent{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
		for lane, ln := range f.Lanes {
			out = append(out, chromeEvent{Name: "thread_name", Ph: "M", PID: pid, TID: lane, Args: map[string]any{"name": ln}},
				chromeEvent{Name: "thread_sort_index", Ph: "M", PID: pid, TID: lane, Args: map[string]any{"sort_index": lane}})
		}
		if f.RTT == 0 && len(files) > 1 {
			out = append(out, chromeEvent{Name: "clock offset not measured", Ph: "i", S: "p", PID: pid, TS: 0})
		}
		d := 0
		for i := range f.Events {
			e := &f.Events[i]
			for ; d < len(f.Drops) && f.Drops[d].Before <= i; d++ {
				out = append(out, chromeEvent{Name: fmt.Sprintf("%d events dropped (the writer fell behind)", f.Drops[d].N),
					Ph: "i", S: "p", PID: pid, TID: int(e.Lane), TS: us(f, e.Start)})
			}
			ce := chromeEvent{Name: e.Name, PID: pid, TID: int(e.Lane), TS: us(f, e.Start)}
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
					out = append(out, chromeEvent{Name: "wait", Cat: "collective", Ph: "X", PID: pid, TID: int(e.Lane),
						TS: us(f, e.Start), Dur: dur(e.Wait)},
						chromeEvent{Name: "transfer", Cat: "collective", Ph: "X", PID: pid, TID: int(e.Lane),
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
