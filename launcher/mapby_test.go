package launcher

import (
	"reflect"
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
		if got := oversubscribe(tc.hosts, tc.np); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("oversubscribe(%+v, %d) = %+v, want %+v", tc.hosts, tc.np, got, tc.want)
		}
	}
	if hosts[0].Slots != 2 {
		t.Errorf("oversubscribe changed its input: %+v", hosts)
	}
}
