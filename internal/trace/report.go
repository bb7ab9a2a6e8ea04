package trace

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is the job report: per collective, and who arrived late.
type Summary struct {
	Ranks int // ranks whose files were read
	Size  int // ranks in the job
	// Silent are the job's ranks without events: no file, or nothing
	// written before the rank ended (killed, or exited without closing).
	Silent []int
	Colls  []CollStat // by total time, largest first
	// Late is per rank with events (Silent ones are left out): how often
	// it was the last to enter an operation of the world communicator, and
	// how long after the first.
	Late []LateStat
	// Matched is how many world operations every rank recorded.
	Matched int
	// Straggler is the rank last to arrive clearly most often, or -1.
	Straggler int
}

// CollStat is one collective (or send, recv) over the job.
type CollStat struct {
	Name  string
	Calls int           // per rank (the most any rank made)
	Bytes int64         // per rank, mean over the ranks that made the call
	Total time.Duration // per rank, mean over the ranks that made the call
	BusBW float64       // bytes/s: nccl-tests' bus bandwidth at the mean time
}

// Mean is the mean time of one call.
func (c CollStat) Mean() time.Duration {
	if c.Calls == 0 {
		return 0
	}
	return c.Total / time.Duration(c.Calls)
}

// LateStat is one rank's arrival record.
type LateStat struct {
	Rank     int
	Last     int           // operations it entered last
	MeanLate time.Duration // mean over matched operations of its entry − the first rank's
	MaxLate  time.Duration
	// MeanTime is the mean time of the matched operations (over the
	// ranks), which the straggler rule weighs MeanLate against.
	MeanTime time.Duration
}

// pointToPoint reports whether name is a send, a receive or a group of
// them: their sequence numbers count a pair's messages, not the
// communicator's collectives, so arrivals leave them out.
func pointToPoint(name string) bool { return name == "send" || name == "recv" || name == "sendrecv" }

// busFactor is nccl-tests' busbw/algbw for name on n ranks; the
// v-collectives (variable counts) take their fixed-count kin's.
func busFactor(name string, n int) float64 {
	f := float64(n-1) / float64(n)
	switch name {
	case "allreduce":
		return 2 * f
	case "allgather", "reducescatter", "alltoall", "gather", "scatter",
		"allgatherv", "alltoallv", "gatherv", "scatterv":
		return f
	}
	return 1
}

// A straggler must be late by enough to matter, on average over the
// collectives compared: at least minStragglerLate after the first rank,
// and at least stragglerLateShare of those collectives' mean time.
const (
	// minStragglerLate: below a millisecond, who enters last is noise on
	// a shared host (a scheduler time slice, a GC pause, the clock sync's
	// error of tens of µs across hosts), not a rank to go and fix; a run
	// once named a rank 25 µs late. Horovod's and NCCL's users look for
	// stalls of milliseconds and more.
	minStragglerLate = time.Millisecond
	// stragglerLateShare: a rank whose lateness is under a tenth of the
	// collectives' time costs the others little (a 1 GiB allreduce of
	// 100 ms does not wait on a rank 2 ms late).
	stragglerLateShare = 0.1
)

// Summarize computes the report of files (one per rank, clocks corrected
// by their offsets).
func Summarize(files []*RankFile) *Summary {
	s := &Summary{Ranks: len(files), Straggler: -1}
	if len(files) == 0 {
		return s
	}
	n := files[0].Header.Size
	s.Size = n
	has := make([]bool, n)
	for _, f := range files {
		if f.Header.Rank >= 0 && f.Header.Rank < n && len(f.Events) > 0 {
			has[f.Header.Rank] = true
		}
	}
	for r, ok := range has {
		if !ok {
			s.Silent = append(s.Silent, r)
		}
	}
	type acc struct {
		calls int
		bytes int64
		total int64
	}
	per := map[string][]acc{}      // name -> per file
	starts := map[uint32][]int64{} // world op seq -> corrected entry per file with events
	times := map[uint32]int64{}    // world op seq -> the ranks' time in it, summed
	var active []*RankFile         // the files with events, which lateness compares
	for _, f := range files {
		if len(f.Events) > 0 {
			active = append(active, f)
		}
	}
	for i, f := range files {
		ai := slices.Index(active, f)
		for _, e := range f.Events {
			if e.Kind != KindOp {
				continue
			}
			a := per[e.Name]
			if a == nil {
				a = make([]acc, len(files))
				per[e.Name] = a
			}
			a[i].calls++
			a[i].bytes += e.Bytes
			a[i].total += e.End - e.Start
			if e.Lane == 0 && !pointToPoint(e.Name) {
				st := starts[e.Seq]
				if st == nil {
					st = make([]int64, len(active))
					for j := range st {
						st[j] = -1 << 62
					}
					starts[e.Seq] = st
				}
				st[ai] = f.Shift(e.Start)
				times[e.Seq] += e.End - e.Start
			}
		}
	}
	for name, a := range per {
		c := CollStat{Name: name}
		var bytes, total, callers int64
		for _, x := range a {
			if x.calls == 0 {
				continue // a rank that left no events, or never made this call
			}
			c.Calls = max(c.Calls, x.calls)
			bytes += x.bytes
			total += x.total
			callers++
		}
		c.Bytes = bytes / callers
		c.Total = time.Duration(total / callers)
		if c.Total > 0 {
			c.BusBW = float64(c.Bytes) / c.Total.Seconds() * busFactor(name, n)
		}
		s.Colls = append(s.Colls, c)
	}
	sort.Slice(s.Colls, func(i, j int) bool {
		if s.Colls[i].Total != s.Colls[j].Total {
			return s.Colls[i].Total > s.Colls[j].Total
		}
		return s.Colls[i].Name < s.Colls[j].Name
	})
	s.Late = make([]LateStat, len(active))
	for i, f := range active {
		s.Late[i].Rank = f.Header.Rank
	}
	sum := make([]int64, len(active))
	var opTime int64
	for seq, st := range starts {
		first, last, lastAt := int64(1<<62), 0, int64(-1<<62)
		complete := true
		for i, t := range st {
			if t == -1<<62 {
				complete = false
				break
			}
			first = min(first, t)
			if t > lastAt {
				last, lastAt = i, t
			}
		}
		if !complete || len(active) < 2 {
			continue
		}
		s.Matched++
		s.Late[last].Last++
		opTime += times[seq] / int64(len(st))
		for i, t := range st {
			sum[i] += t - first
			s.Late[i].MaxLate = max(s.Late[i].MaxLate, time.Duration(t-first))
		}
	}
	if s.Matched > 0 {
		for i := range s.Late {
			s.Late[i].MeanLate = time.Duration(sum[i] / int64(s.Matched))
			s.Late[i].MeanTime = time.Duration(opTime / int64(s.Matched))
		}
	}
	// A straggler is last clearly more often than chance: in at least half
	// the operations and 1.5× its fair share, over at least 3; and late
	// enough to matter (minStragglerLate, stragglerLateShare).
	best := -1
	for i, l := range s.Late {
		if best < 0 || l.Last > s.Late[best].Last {
			best = i
		}
	}
	if best >= 0 && s.Matched >= 3 {
		share := float64(s.Late[best].Last) / float64(s.Matched)
		l := s.Late[best]
		if share >= 0.5 && share >= 1.5/float64(len(active)) &&
			l.MeanLate >= minStragglerLate && float64(l.MeanLate) >= stragglerLateShare*float64(l.MeanTime) {
			s.Straggler = s.Late[best].Rank
		}
	}
	return s
}

// String formats the report as gorun prints it.
func (s *Summary) String() string {
	var b strings.Builder
	if s.Size > s.Ranks {
		fmt.Fprintf(&b, "gorun: report: %d of %d ranks\n", s.Ranks, s.Size)
	} else {
		fmt.Fprintf(&b, "gorun: report: %d ranks\n", s.Ranks)
	}
	if len(s.Silent) > 0 {
		ranks := make([]string, len(s.Silent))
		for i, r := range s.Silent {
			ranks[i] = strconv.Itoa(r)
		}
		fmt.Fprintf(&b, "  no events from rank %s (no file, or none written before the rank ended)\n", strings.Join(ranks, ", "))
	}
	fmt.Fprintf(&b, "  %-14s %8s %12s %12s %12s %12s\n", "collective", "calls", "bytes/rank", "total", "mean", "busbw")
	for _, c := range s.Colls {
		bw := "-"
		switch {
		case c.BusBW >= 1e9:
			bw = fmt.Sprintf("%.3g GB/s", c.BusBW/1e9)
		case c.BusBW >= 1e6:
			bw = fmt.Sprintf("%.3g MB/s", c.BusBW/1e6)
		case c.BusBW > 0:
			bw = fmt.Sprintf("%.3g kB/s", c.BusBW/1e3)
		}
		fmt.Fprintf(&b, "  %-14s %8d %12s %12s %12s %12s\n", c.Name, c.Calls, byteSize(c.Bytes), round(c.Total), round(c.Mean()), bw)
	}
	if s.Matched > 0 {
		fmt.Fprintf(&b, "  arrivals over %d collectives of the world communicator (lateness: entry after the first rank's):\n", s.Matched)
		fmt.Fprintf(&b, "  %-6s %12s %14s %14s\n", "rank", "last", "mean lateness", "max lateness")
		for _, l := range s.Late {
			fmt.Fprintf(&b, "  %-6d %5d (%3.0f%%) %14s %14s\n", l.Rank, l.Last, 100*float64(l.Last)/float64(s.Matched), round(l.MeanLate), round(l.MaxLate))
		}
	}
	if s.Straggler >= 0 {
		l := s.Late[0]
		for _, x := range s.Late {
			if x.Rank == s.Straggler {
				l = x
			}
		}
		fmt.Fprintf(&b, "  straggler: rank %d (last in %d of %d collectives, %s late on average)\n", l.Rank, l.Last, s.Matched, round(l.MeanLate))
	} else if s.Matched > 0 {
		fmt.Fprintf(&b, "  straggler: none (no rank was last in most collectives by at least %s and %.0f%% of their time on average)\n",
			minStragglerLate, 100*stragglerLateShare)
	}
	return b.String()
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d >= time.Microsecond:
		return d.Round(100 * time.Nanosecond).String()
	}
	return d.String()
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
