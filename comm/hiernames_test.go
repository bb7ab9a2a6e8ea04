package comm

import (
	"errors"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// rankWords finds the ranks a text names: "rank 4", "ranks 3 and 5",
// "ranks 3, 4 and 5", "root 4".
var rankWords = regexp.MustCompile(`\b(?:ranks?|root) (-?\d+(?:(?:, | and )-?\d+)*)`)

// notRanks are words of a mismatch that follow "this rank" with no rank:
// "count 4, this rank 8" (this rank's count).
var notRanks = regexp.MustCompile(`(?:count|tag) -?\d+, this rank -?\d+`)

// namedRanks lists the ranks text names (rankWords).
func namedRanks(text string) []int {
	var out []int
	text = notRanks.ReplaceAllString(text, "")
	for _, m := range rankWords.FindAllStringSubmatch(text, -1) {
		for _, f := range regexp.MustCompile(`-?\d+`).FindAllString(m[1], -1) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
	}
	return out
}

// checkNamed fails unless every rank's error is a *RankError wrapping
// want that names culprit, and its text names ranks of allowed only.
func checkNamed(t *testing.T, what string, errs []error, want error, culprit int, allowed ...int) {
	t.Helper()
	for r, err := range errs {
		var re *RankError
		if !errors.As(err, &re) || !errors.Is(err, want) {
			t.Errorf("%s: rank %d: got %v, want a *RankError wrapping %v", what, r, err, want)
			continue
		}
		if re.Rank != culprit {
			t.Errorf("%s: rank %d: error names rank %d, want %d: %v", what, r, re.Rank, culprit, err)
		}
		for _, n := range namedRanks(err.Error()) {
			if !slices.Contains(allowed, n) {
				t.Errorf("%s: rank %d: text names rank %d, not one of %v: %v", what, r, n, allowed, err)
			}
		}
	}
}

// TestHierMismatchNamesParentRanks: a mismatched call inside a
// hierarchical collective's sub-communicator (here rank 4 of 2 hosts x 3
// ranks passes another op, which its host's reduce-scatter finds) is
// named on every rank by ranks of the communicator the user called on,
// in the RankError and in its text (the host's ranks are 3, 4 and 5;
// their ranks in the host's communicator, 0, 1 and 2, must not appear).
func TestHierMismatchNamesParentRanks(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 6, withHosts(0, 0, 0, 1, 1, 1))
	errs := onAll(cs, func(c *Comm) error {
		op := Sum
		if c.Rank() == 4 {
			op = Max
		}
		buf := make([]float64, hierMinBytes/8)
		if !c.hierFor(0, len(bytesOf(buf))) {
			return errors.New("not hierarchical")
		}
		return AllReduce(ctx, c, buf, buf, op)
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
	}
	checkNamed(t, "op", errs, ErrMismatch, 4, 3, 4, 5)
}

// TestHierRootMismatchNamesParentRanks: a hierarchical broadcast where
// rank 4 names another root (3) than the others (0) fails on rank 4's
// host, and the next operation of the ranks of host 0 (theirs completes:
// it needs nothing of host 1), naming rank 4, with texts that name ranks
// of host 1 by their ranks in the communicator the user called on.
func TestHierRootMismatchNamesParentRanks(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 6, withHosts(0, 0, 0, 1, 1, 1))
	errs := onAll(cs, func(c *Comm) error {
		root := 0
		if c.Rank() == 4 {
			root = 3
		}
		buf := make([]float64, hierMinBytes/8)
		return Broadcast(ctx, c, buf, root)
	})
	for r, err := range errs {
		if err == nil && r < 3 {
			errs[r] = cs[r].Barrier(ctx)
		}
		t.Logf("rank %d: %v", r, errs[r])
	}
	checkNamed(t, "root", errs, ErrMismatch, 4, 3, 4, 5)
}
