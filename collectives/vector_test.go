package collectives

import "testing"

// vcounts is a count pattern with zeros and uneven sizes: rank r's count
// towards peer p.
func vcount(r, p int) int { return (r*3 + p*5) % 4 }

func TestScanSchedules(t *testing.T) {
	for _, n := range worldSizes() {
		for _, count := range []int{0, 1, 7} {
			for _, chunk := range []int{2, 1 << 20} {
				for _, c := range []Collective{Scan, ExScan} {
					scheds := build(t, c, RecDoubling, n, 0, count, chunk)
					work, input := make([][]elem, n), make([][]elem, n)
					for r := range n {
						work[r], input[r] = garbage(count), make([]elem, count)
						for i := range count {
							input[r][i] = one(r, i)
						}
						if c == Scan {
							copy(work[r], input[r])
						}
					}
					if err := simulate(scheds, work, input, 1, nil); err != nil {
						t.Fatalf("%s n=%d count=%d chunk=%d: %v", c, n, count, chunk, err)
					}
					for r := range n {
						upto := r + 1 // ranks 0 … r
						if c == ExScan {
							upto = r
						}
						for i := range count {
							if c == ExScan && r == 0 {
								if work[r][i].idx != -1 {
									t.Fatalf("exscan n=%d: rank 0 received data", n)
								}
								continue
							}
							if err := checkElem(work[r][i], i, allOnes(upto)); err != nil {
								t.Fatalf("%s n=%d count=%d chunk=%d rank %d: %v", c, n, count, chunk, r, err)
							}
						}
					}
				}
			}
		}
	}
}

func TestVSchedules(t *testing.T) {
	for _, n := range worldSizesTo(1024) { // n-1 sends and receives a rank
		// alltoallv: rank r sends vcount(r, p) elements to p, packed in
		// rank order with a gap of one after each block.
		sc, sd, rc, rd := make([][]int, n), make([][]int, n), make([][]int, n), make([][]int, n)
		work, input := make([][]elem, n), make([][]elem, n)
		scheds := make([]*Schedule, n)
		for r := range n {
			sc[r], sd[r], rc[r], rd[r] = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			so, ro := 0, 0
			for p := range n {
				sc[r][p], sd[r][p] = vcount(r, p), so
				rc[r][p], rd[r][p] = vcount(p, r), ro
				so += sc[r][p] + 1
				ro += rc[r][p] + 1
			}
			input[r], work[r] = make([]elem, so), garbage(ro)
			for i := range input[r] {
				input[r][i] = one(r, i)
			}
			copy(work[r][rd[r][r]:rd[r][r]+rc[r][r]], input[r][sd[r][r]:])
			scheds[r] = PairwiseAllToAllV(r, n, sc[r], sd[r], rc[r], rd[r], 2)
		}
		if err := simulate(scheds, work, input, 1, nil); err != nil {
			t.Fatalf("alltoallv n=%d: %v", n, err)
		}
		for r := range n {
			for p := range n {
				for j := range rc[r][p] {
					if err := checkElem(work[r][rd[r][p]+j], sd[p][r]+j, only(p)); err != nil {
						t.Fatalf("alltoallv n=%d rank %d from %d: %v", n, r, p, err)
					}
				}
			}
		}
		// allgatherv, gatherv and scatterv with rank r's count vcount(r, 0).
		counts, displs := make([]int, n), make([]int, n)
		total := 0
		for r := range n {
			counts[r], displs[r] = vcount(r, 0), total
			total += counts[r] + 1
		}
		root := n / 2
		for _, c := range []Collective{AllGatherV, GatherV, ScatterV} {
			for r := range n {
				switch c {
				case AllGatherV:
					scheds[r] = DirectAllGatherV(r, n, counts, displs, 2)
				case GatherV:
					scheds[r] = DirectGatherV(r, n, root, counts[r], counts, displs, 2)
				case ScatterV:
					scheds[r] = DirectScatterV(r, n, root, counts[r], counts, displs, 2)
				}
				input[r], work[r] = make([]elem, counts[r]), garbage(total)
				if c == ScatterV {
					input[r], work[r] = make([]elem, total), garbage(counts[r])
				}
				for i := range input[r] {
					input[r][i] = one(r, i)
				}
			}
			if err := simulate(scheds, work, input, 1, nil); err != nil {
				t.Fatalf("%s n=%d: %v", c, n, err)
			}
			for r := range n {
				for p := range n {
					if p == r || (c == GatherV && r != root) || c == ScatterV {
						continue
					}
					for j := range counts[p] {
						if err := checkElem(work[r][displs[p]+j], j, only(p)); err != nil {
							t.Fatalf("%s n=%d rank %d from %d: %v", c, n, r, p, err)
						}
					}
				}
				if c == ScatterV && r != root {
					for j := range counts[r] {
						if err := checkElem(work[r][j], displs[r]+j, only(root)); err != nil {
							t.Fatalf("scatterv n=%d rank %d: %v", n, r, err)
						}
					}
				}
			}
		}
	}
}
