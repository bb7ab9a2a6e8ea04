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
