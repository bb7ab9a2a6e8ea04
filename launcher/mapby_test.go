package launcher

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestPlaceByNode(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
	got, err := PlaceBy(hosts, 3, "node")
	want := []Slot{{Rank: 0, Host: "a", LocalRank: 0, LocalSize: 2}, {Rank: 1, Host: "b", LocalRank: 0, LocalSize: 1},
		{Rank: 2, Host: "a", LocalRank: 1, LocalSize: 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("--map-by node, 3 ranks on a:2,b:2 = %+v %v, want %+v", got, err, want)
	}
	if _, err := PlaceBy(hosts, 5, "node"); err == nil {
		t.Error("5 ranks on 4 slots accepted")
	}
	if _, err := PlaceBy(hosts, 2, "socket"); err == nil {
		t.Error("unknown --map-by accepted")
	}
	// Open MPI's values gorun does not take say what gorun does instead.
	for v, want := range map[string]string{
		"ppr:4:node":         "--npernode N",
		"node:OVERSUBSCRIBE": "--map-by node --oversubscribe",
		"slot:PE=2":          "--bind-to",
		"numa":               "--bind-to core|numa",
	} {
		if _, err := PlaceBy(hosts, 2, v); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), want) {
			t.Errorf("--map-by %s: %v, want a usage error that says %q", v, err, want)
		}
	}
	slot, _ := PlaceBy(hosts, 3, "slot")
	if slot[1].Host != "a" || slot[2].Host != "b" {
		t.Errorf("--map-by slot fills a first: %+v", slot)
	}
	if capped := CapSlots(hosts, 1); capped[0].Slots != 1 || capped[1].Slots != 1 || hosts[0].Slots != 2 {
		t.Errorf("CapSlots(1) = %+v (input %+v)", capped, hosts)
	}
}

// --oversubscribe, as mpirun's: more ranks than slots, the extra ones
// dealt over the hosts in turn; names of this machine are one host.
func TestOversubscribe(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
	for _, tc := range []struct {
		hosts []Host
		np    int
		want  []Host
	}{
		{hosts, 3, hosts},
		{hosts, 6, []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 3}}},
		{hosts, 7, []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 3}}},
		{[]Host{{Name: "localhost", Slots: 1}, {Name: "127.0.0.1", Slots: 1}}, 5, []Host{{Name: "localhost", Slots: 5}}},
		{nil, 8, nil},
	} {
		if got, err := fitSlots(tc.hosts, tc.np, true, 0); err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("fitSlots(%+v, %d, oversubscribe) = %+v, %v; want %+v", tc.hosts, tc.np, got, err, tc.want)
		}
	}
	if hosts[0].Slots != 2 {
		t.Errorf("fitSlots changed its input: %+v", hosts)
	}
}

// A hostfile's max_slots, as Open MPI's: a host takes ranks beyond its
// slots up to max_slots without --oversubscribe, and none beyond it even
// with; more is a usage error that names the hosts at their bound. gorun
// read max_slots and ignored it: -np 6 on two hosts of slots=2
// max_slots=4 failed without --oversubscribe, and with it put 5 on one.
func TestMaxSlots(t *testing.T) {
	capped := []Host{{Name: "a", Slots: 2, MaxSlots: 4}, {Name: "b", Slots: 2, MaxSlots: 4}}
	mixed := []Host{{Name: "a", Slots: 2, MaxSlots: 3}, {Name: "b", Slots: 2}}
	for _, tc := range []struct {
		hosts   []Host
		np      int
		oversub bool
		want    []Host
		err     string // in the error, when one is wanted
	}{
		{capped, 6, false, []Host{{Name: "a", Slots: 3, MaxSlots: 4}, {Name: "b", Slots: 3, MaxSlots: 4}}, ""},
		{capped, 8, false, []Host{{Name: "a", Slots: 4, MaxSlots: 4}, {Name: "b", Slots: 4, MaxSlots: 4}}, ""},
		{capped, 9, false, nil, "-np 9 but the hosts take at most 8 ranks (a max_slots=4, b max_slots=4)"},
		{capped, 9, true, nil, "at most 8 ranks"},
		{mixed, 5, false, []Host{{Name: "a", Slots: 3, MaxSlots: 3}, {Name: "b", Slots: 2}}, ""},
		{mixed, 6, false, nil, "at most 5 ranks (a max_slots=3); --oversubscribe allows more on the hosts without max_slots"},
		{mixed, 7, true, []Host{{Name: "a", Slots: 3, MaxSlots: 3}, {Name: "b", Slots: 4}}, ""},
		{[]Host{{Name: "a", Slots: 2}}, 3, false, nil, "-np 3 but the hosts have 2 slots (--oversubscribe allows more)"},
	} {
		got, err := fitSlots(tc.hosts, tc.np, tc.oversub, 0)
		switch {
		case tc.err != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("fitSlots(%+v, %d, %v) = %+v, %v; want an error with %q", tc.hosts, tc.np, tc.oversub, got, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("fitSlots(%+v, %d, %v) = %+v, %v; want %+v", tc.hosts, tc.np, tc.oversub, got, err, tc.want)
		}
	}
	// --npernode caps max_slots too.
	if got := CapSlots(capped, 3); got[0].Slots != 2 || got[0].MaxSlots != 3 {
		t.Errorf("CapSlots(%+v, 3) = %+v, want slots 2, max_slots 3", capped, got)
	}
}
