package jobctl

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stalled reports whether the job looks hung: at least one rank is inside a
// collective and no rank changed its op, seq or phase for threshold.
func (s Snapshot) Stalled(now time.Time, threshold time.Duration) bool {
	if now.Sub(s.LastProgress) < threshold {
		return false
	}
	for _, r := range s.Ranks {
		if r.InOp && !r.Done {
			return true
		}
	}
	return false
}

// StallReport describes where each of the size ranks is, grouped by
// position, the way NCCL's and Horovod's stall checkers do:
//
//	stall: ranks 0,1,3 in allreduce #812 for 31s; rank 2 in broadcast #811 for 31s
//
// Ranks that never reported are listed as silent. Of a rank that closed
// its client the report says only that ("closed its job-control
// connection"): this view cannot tell whether its work succeeded, nor
// whether its process has ended (the launcher knows; see its stall
// report).
func (s Snapshot) StallReport(now time.Time, size int) string {
	type group struct {
		what  string
		ranks []int
		since time.Time
		order int
	}
	groups := map[string]*group{}
	add := func(key, what string, order int, rank int, since time.Time) {
		g := groups[key]
		if g == nil {
			g = &group{what: what, since: since, order: order}
			groups[key] = g
		}
		g.ranks = append(g.ranks, rank)
		if since.Before(g.since) {
			g.since = since
		}
	}
	seen := map[int]bool{}
	for _, r := range s.Ranks {
		seen[r.Rank] = true
		switch {
		case r.Done:
			add("done", "closed its job-control connection", 3, r.Rank, r.Since)
		case !r.Connected:
			add("gone", "disconnected", 4, r.Rank, r.LastSeen)
		case r.InOp:
			what := fmt.Sprintf("in %s #%d", r.Op, r.Seq)
			add("in "+what, what, 0, r.Rank, r.Since)
		case r.Op != "":
			what := fmt.Sprintf("idle after %s #%d", r.Op, r.Seq)
			add(what, what, 1, r.Rank, r.Since)
		default:
			what := "not in a collective"
			if r.Phase != "" {
				what += " (phase " + r.Phase + ")"
			}
			add(what, what, 2, r.Rank, r.Since)
		}
	}
	for i := 0; i < size; i++ {
		if !seen[i] {
			add("silent", "silent", 5, i, time.Time{})
		}
	}
	list := make([]*group, 0, len(groups))
	for _, g := range groups {
		sort.Ints(g.ranks)
		list = append(list, g)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].order != list[j].order {
			return list[i].order < list[j].order
		}
		return list[i].ranks[0] < list[j].ranks[0]
	})
	parts := make([]string, 0, len(list))
	for _, g := range list {
		word := "rank "
		if len(g.ranks) > 1 {
			word = "ranks "
		}
		p := word + RankList(g.ranks) + " " + g.what
		if !g.since.IsZero() && g.order <= 2 {
			p += fmt.Sprintf(" for %s", now.Sub(g.since).Round(time.Second))
		}
		parts = append(parts, p)
	}
	return "stall: " + strings.Join(parts, "; ")
}

// RankList formats sorted ranks compactly: "0,1,3" or "0-5,7".
func RankList(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ranks[i]))
		switch {
		case j == i+1:
			b.WriteString("," + strconv.Itoa(ranks[j]))
		case j > i+1:
			b.WriteString("-" + strconv.Itoa(ranks[j]))
		}
		i = j + 1
	}
	return b.String()
}
