package launcher

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// plainEvery is how often an unchanged status is repeated off a terminal.
const plainEvery = 10 * time.Second

// monitor turns the job control server's state into the live view: a
// start-up status line while ranks form the world, and a stall report
// when no rank makes progress in a collective. Only the runner's goroutine
// calls it.
type monitor struct {
	con         *console
	srv         statusSource
	size        int
	start       time.Time
	statusDelay time.Duration
	stall       time.Duration // <= 0: no stall reports
	// ended tells how each rank whose process ended did (stall.go);
	// nil: no rank's end is known.
	ended func() map[int]string

	formed     bool   // every rank joined
	shown      bool   // a status was printed
	lastPlain  string // last status printed off a terminal, without elapsed time
	lastPlainT time.Time
	stallFor   time.Time // LastProgress of the last stall report
	stallAt    time.Time
}

// statusSource is the part of *jobctl.Server the monitor reads.
type statusSource interface{ Snapshot() jobctl.Snapshot }

func newMonitor(con *console, srv statusSource, size int, statusDelay, stall time.Duration) *monitor {
	return &monitor{con: con, srv: srv, size: size, start: time.Now(), statusDelay: statusDelay, stall: stall}
}

// tick updates the live view from the server's state now, and returns
// that state for the runner's own checks (silent.go).
func (m *monitor) tick(now time.Time) jobctl.Snapshot {
	snap := m.srv.Snapshot()
	if !m.formed {
		m.startup(snap, now)
	}
	if m.stall > 0 {
		var ended map[int]string
		if m.ended != nil {
			ended = m.ended()
		}
		stalled := liveRanks(snap, ended).Stalled(now, m.stall)
		if stalled && (!snap.LastProgress.Equal(m.stallFor) || now.Sub(m.stallAt) >= m.stall) {
			m.stallFor, m.stallAt = snap.LastProgress, now
			m.con.message("gorun: " + stallReport(snap, now, m.size, ended))
		}
	}
	return snap
}

// startup shows how many ranks joined, once the job is slow to form and at
// least one rank reports (a program that does not use comm stays quiet).
func (m *monitor) startup(snap jobctl.Snapshot, now time.Time) {
	joined := 0
	phases := map[string]int{}
	for _, r := range snap.Ranks {
		if r.Joined || r.Phase == "ready" {
			joined++
			continue
		}
		p := r.Phase
		if p == "" {
			p = "started"
		}
		phases[p]++
	}
	if joined >= m.size {
		m.formed = true
		if m.shown {
			m.con.setStatus("")
			m.con.message(fmt.Sprintf("gorun: all %d ranks joined after %s", m.size, now.Sub(m.start).Round(100*time.Millisecond)))
		}
		return
	}
	if len(snap.Ranks) == 0 || now.Sub(m.start) < m.statusDelay {
		return
	}
	if silent := m.size - len(snap.Ranks); silent > 0 {
		phases["not reporting"] = silent
	}
	keys := make([]string, 0, len(phases))
	for k := range phases {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", phases[k], k)
	}
	status := fmt.Sprintf("gorun: %d/%d ranks joined (%s)", joined, m.size, strings.Join(parts, ", "))
	elapsed := fmt.Sprintf(", %ds", int(now.Sub(m.start).Seconds()))
	m.shown = true
	if m.con.tty {
		m.con.setStatus(status + elapsed)
		return
	}
	if status != m.lastPlain || now.Sub(m.lastPlainT) >= plainEvery {
		m.lastPlain, m.lastPlainT = status, now
		m.con.message(status + elapsed)
	}
}

// finish removes the status line.
func (m *monitor) finish() {
	if m.con.tty {
		m.con.setStatus("")
	}
}
