package comm

import (
	"testing"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
)

// A job on tcp stages 1 MiB slots, others 128 KiB ones, WithStaging wins
// over both, and every choice stays within the per-rank budget.
func TestStagingForTransport(t *testing.T) {
	old := osGetenv
	defer func() { osGetenv = old }()
	osGetenv = mapEnv(map[string]string{})
	for _, tc := range []struct {
		name string
		opts []Option
		size int
		want engine.LinkParams
	}{
		{"auto", nil, 2, engine.LinkParams{Slots: 8, SlotBytes: 128 << 10}},
		{"shm", []Option{WithTransport("shm")}, 2, engine.LinkParams{Slots: 8, SlotBytes: 128 << 10}},
		{"tcp", []Option{WithTransport("tcp")}, 2, engine.LinkParams{Slots: 8, SlotBytes: 1 << 20}},
		{"tcp4", []Option{WithTransport("tcp")}, 4, engine.LinkParams{Slots: 8, SlotBytes: 1 << 20}},
		{"tcp-set", []Option{WithTransport("tcp"), WithStaging(4, 64<<10)}, 2, engine.LinkParams{Slots: 4, SlotBytes: 64 << 10}},
		{"tcp-large", []Option{WithTransport("tcp")}, 1024, engine.LinkParams{Slots: 8, SlotBytes: 128 << 10}},
	} {
		cfg, err := newConfig(tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := stagingFor(cfg, tc.size)
		if got != tc.want {
			t.Errorf("%s: stagingFor(%d) = %+v, want %+v", tc.name, tc.size, got, tc.want)
		}
		if per := stagingPerRank / collectives.MaxInitPeers(tc.size); got.Slots*got.SlotBytes > per {
			t.Errorf("%s: %d×%d over the per-peer budget %d", tc.name, got.Slots, got.SlotBytes, per)
		}
	}
}

// A world in one process keeps 8 slots of 128 KiB while the full mesh's
// budget allows them, then 8 of 16 KiB, a window that holds a 64 KiB
// piece (zero-copy from engine.DirectMin), while localBudget allows it,
// and the full mesh's small slots beyond, but 8 of them (localMinSlots),
// not 2, while those fit localSlotBudget.
func TestStagingForLocal(t *testing.T) {
	old := osGetenv
	defer func() { osGetenv = old }()
	osGetenv = mapEnv(map[string]string{})
	cfg, err := newConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.local = true
	for _, tc := range []struct {
		size int
		want engine.LinkParams
	}{
		{2, engine.LinkParams{Slots: 8, SlotBytes: 128 << 10}},
		{4, engine.LinkParams{Slots: 8, SlotBytes: 128 << 10}},
		{8, engine.LinkParams{Slots: 8, SlotBytes: 64 << 10}},
		{13, engine.LinkParams{Slots: 8, SlotBytes: 16 << 10}},
		{14, engine.LinkParams{Slots: 8, SlotBytes: 16 << 10}}, // the full mesh's: 8 × 8 KiB
		{64, engine.LinkParams{Slots: 8, SlotBytes: 16 << 10}},
		{204, engine.LinkParams{Slots: 8, SlotBytes: 16 << 10}},
		{205, engine.LinkParams{Slots: 8, SlotBytes: 4 << 10}},
		{1024, engine.LinkParams{Slots: 8, SlotBytes: 4 << 10}},
		{1260, engine.LinkParams{Slots: 8, SlotBytes: 4 << 10}},
		{1261, engine.LinkParams{Slots: 2, SlotBytes: 4 << 10}}, // localSlotBudget
		{4096, engine.LinkParams{Slots: 2, SlotBytes: 4 << 10}},
	} {
		got := stagingFor(cfg, tc.size)
		if got != tc.want {
			t.Errorf("stagingFor(%d) = %+v, want %+v", tc.size, got, tc.want)
		}
		if tc.size <= 204 && engine.Window(got) < engine.DirectMin {
			t.Errorf("%d ranks: window %d holds no piece of engine.DirectMin (%d)", tc.size, engine.Window(got), engine.DirectMin)
		}
	}
}
