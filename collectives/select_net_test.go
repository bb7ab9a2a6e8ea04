package collectives

import "testing"

// TestNetTable: between hosts there are no fitted constants, and the
// table is netSelect's at every size class (the hand-made table, with the
// tcp pair's recursive doubling to 512 KiB).
func TestNetTable(t *testing.T) {
	if _, ok := CostOf(netProvider); ok {
		t.Fatal("net has fitted constants: derive its table from them")
	}
	for _, n := range []int{2, 3, 4, 8, 17, 64, 1024} {
		tab := TableFor(netProvider, n, 0)
		for c := range Collective(numCollectives) {
			for b := 8; b <= 64<<20; b *= 2 {
				if got, want := tab.Algo(c, b), netSelect(c, n, b); got != want {
					t.Errorf("%s %d ranks %s: %s, want %s", c, n, sizeName(b), got, want)
				}
			}
		}
	}
	for _, tc := range []struct {
		n, b int
		want Algo
	}{{2, 512 << 10, RecDoubling}, {2, 1 << 20, Ring}, {4, 64 << 10, HalvingDoubling}, {4, 1 << 20, Ring}} {
		if got := TableFor(netProvider, tc.n, 0).Algo(AllReduce, tc.b); got != tc.want {
			t.Errorf("allreduce %d ranks %s: %s, want %s", tc.n, sizeName(tc.b), got, tc.want)
		}
	}
}
