//go:build linux

package engine

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestNameRanks: an engine told what to call its ranks (NameRanks, as a
// hierarchical sub-communicator's is: by the ranks of the communicator
// the user called on) names them so in every text it builds, a root
// included, on both ranks; the ranks in PeerError stay its own. Here
// rank 0 is called 7 and rank 1 is called 3.
func TestNameRanks(t *testing.T) {
	names := []int{7, 3}
	for _, tc := range []struct {
		name  string
		p     [2]func() (*Plan, *Call)
		words string // in some rank's text, or found's
	}{
		// rank 1 runs rank 0's broadcast, but says it is from rank 1
		{"root", [2]func() (*Plan, *Call){
			func() (*Plan, *Call) { return bcastRun(0, 0, 4, 0) },
			func() (*Plan, *Call) { p, c := bcastRun(1, 0, 4, 0); c.Root = 1; return p, c }},
			"rank 7 disagrees with rank 3: root 7, this rank 3"},
		{"count", [2]func() (*Plan, *Call){
			func() (*Plan, *Call) { return p2pRun(0, true, 4, 5, 0) },
			func() (*Plan, *Call) { return p2pRun(1, false, 8, 5, 0) }},
			"rank 7 disagrees with rank 3: count 4, this rank 8"},
		// each receives from the other
		{"p2p-pair", [2]func() (*Plan, *Call){
			func() (*Plan, *Call) { return p2pRun(0, false, 4, 5, 0) },
			func() (*Plan, *Call) { return p2pRun(1, false, 4, 5, 0) }},
			"ranks 3 and 7 each wait for the other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := pairEngines(t, "mem", LinkParams{Slots: 4, SlotBytes: 4096})
			for _, x := range e {
				x.NameRanks(names)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p0, c0 := tc.p[0]()
			p1, c1 := tc.p[1]()
			errs := runPair(ctx, e, [2]*Plan{p0, p1}, [2]*Call{c0, c1})
			found := false
			for r, err := range errs {
				if err == nil && tc.name != "p2p-pair" {
					continue // the sender, done before the receiver looked
				}
				var pe *PeerError
				if !errors.As(err, &pe) || !errors.Is(err, ErrMismatch) || pe.Rank < 0 || pe.Rank > 1 {
					t.Fatalf("rank %d: %v, want a PeerError of ErrMismatch naming rank 0 or 1", r, err)
				}
				text := pe.Err.Error()
				// The receiver's text is what it saw, or, where its
				// decision came before its own words were in, the vote's.
				found = found || strings.Contains(text, tc.words) ||
					tc.name != "p2p-pair" && strings.Contains(text, "rank 3 found that rank 7's call differs")
				// ("count 4, this rank 8": this rank's count)
				bare := regexp.MustCompile(`(?:count|tag) -?\d+, this rank -?\d+`).ReplaceAllString(text, "")
				for _, m := range regexp.MustCompile(`\b(?:ranks?|root) (\d+)(?: and (\d+))?`).FindAllStringSubmatch(bare, -1) {
					for _, n := range m[1:] {
						if n != "" && n != "7" && n != "3" {
							t.Errorf("rank %d: text names %s by its engine's rank: %s", r, m[0], text)
						}
					}
				}
				t.Logf("rank %d: %v", r, err)
			}
			if !found {
				t.Errorf("no rank's text says %q", tc.words)
			}
		})
	}
}
