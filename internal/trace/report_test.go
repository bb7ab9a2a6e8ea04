package trace

import (
	"testing"
	"time"
)

// The straggler must be late by enough to matter: a rank last in every
// collective, 25 µs after the first (noise on a shared host), or 2 ms
// late to allreduces of 100 ms, is not named; 3 ms late to 5 ms ones is.
// Before, the first two were named stragglers.
func TestStragglerFloor(t *testing.T) {
	us, ms := int64(time.Microsecond), int64(time.Millisecond)
	for _, tc := range []struct {
		late, dur int64
		want      int
	}{
		{late: 25 * us, dur: ms, want: -1},
		{late: 2 * ms, dur: 100 * ms, want: -1},
		{late: 3 * ms, dur: 5 * ms, want: 1},
	} {
		mk := func(rank int, late int64) *RankFile {
			rf := &RankFile{Header: Header{Rank: rank, Size: 2, Host: "h"}, Lanes: []string{"comm"}}
			for i := range int64(5) {
				t0 := i * 200 * ms
				rf.Events = append(rf.Events, Event{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: uint32(i), Bytes: 8,
					Start: t0 + late, End: t0 + tc.dur})
			}
			return rf
		}
		s := Summarize([]*RankFile{mk(0, 0), mk(1, tc.late)})
		if s.Late[1].Last != 5 || s.Straggler != tc.want {
			t.Errorf("rank 1 last in %d of 5, %v late to %v allreduces: straggler %d, want %d\n%s",
				s.Late[1].Last, time.Duration(tc.late), time.Duration(tc.dur), s.Straggler, tc.want, s)
		}
	}
}

// busbw takes the size of each call's communicator, not the job's: an
// allreduce of 1 MiB in 1 ms on a communicator of 2 of the job's 4 ranks
// has busbw = algbw × 2(2−1)/2 = 1 MiB/ms. Before, 2(4−1)/4: 1.5×.
func TestBusBWCommunicatorSize(t *testing.T) {
	ms := int64(time.Millisecond)
	var files []*RankFile
	for r := range 4 {
		files = append(files, commFile(r, 4, []lane{
			{name: "comm", info: CommInfo{Rank: r, Size: 4, ID: 1}},
			{name: "comm 1", info: CommInfo{Rank: r / 2, Size: 2, ID: uint64(2 + r%2)}, n: 4, step: 10 * ms, dur: ms},
		}))
	}
	s := Summarize(files)
	want := float64(1<<20) / 1e-3
	if len(s.Colls) != 1 || s.Colls[0].BusBW < want*0.999 || s.Colls[0].BusBW > want*1.001 {
		t.Errorf("collectives %+v: want allreduce busbw %.4g B/s", s.Colls, want)
	}
}
