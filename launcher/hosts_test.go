package launcher

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostfile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Host
		bad      bool
	}{
		{"empty", "", nil, false},
		{"comments", "# cluster\n\n   # indented\n", nil, false},
		{"plain", "node1\nnode2 slots=4\n", []Host{{Name: "node1", Slots: 1}, {Name: "node2", Slots: 4}}, false},
		{"max_slots and comment", "node1 slots=2 max_slots=8 # big\n", []Host{{Name: "node1", Slots: 2, MaxSlots: 8}}, false},
		{"max-slots alone", "node1 max-slots=3\n", []Host{{Name: "node1", Slots: 1, MaxSlots: 3}}, false},
		{"max_slots add up", "a slots=1 max_slots=2\na slots=1 max_slots=2\nb max_slots=2\nb\n",
			[]Host{{Name: "a", Slots: 2, MaxSlots: 4}, {Name: "b", Slots: 2}}, false},
		{"max_slots below slots", "a slots=4 max_slots=2\n", nil, true},
		// MPICH's hostfile: host:N. It was a host named "a:4".
		{"mpich", "a:4\nb:2 # two\nc\n", []Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 2}, {Name: "c", Slots: 1}}, false},
		{"mpich and max_slots", "a:2 max_slots=4\n", []Host{{Name: "a", Slots: 2, MaxSlots: 4}}, false},
		{"mpich user", "root@n3:2\n", []Host{{Name: "root@n3", Slots: 2}}, false},
		{"mpich ipv6", "[fe80::1]:3\n[::2]\n", []Host{{Name: "fe80::1", Slots: 3}, {Name: "::2", Slots: 1}}, false},
		{"mpich zero", "a:0\n", nil, true},
		{"mpich junk", "a:two\n", nil, true},
		{"mpich and slots", "a:2 slots=2\n", nil, true},
		{"repeated host adds", "a slots=2\nb\na slots=3\n", []Host{{Name: "a", Slots: 5}, {Name: "b", Slots: 1}}, false},
		{"tabs and CRLF", "a\tslots=2\r\nb slots=1\r\n", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 1}}, false},
		{"ipv4 and user", "10.0.0.1 slots=2\nroot@n3\n", []Host{{Name: "10.0.0.1", Slots: 2}, {Name: "root@n3", Slots: 1}}, false},
		{"ipv6", "fe80::1%eth0 slots=2\n", []Host{{Name: "fe80::1%eth0", Slots: 2}}, false},
		{"zero slots", "a slots=0\n", nil, true},
		{"negative slots", "a slots=-1\n", nil, true},
		{"huge slots", "a slots=99999999999\n", nil, true},
		{"junk slots", "a slots=two\n", nil, true},
		{"unknown key", "a cpus=2\n", nil, true},
		{"bare word", "a b\n", nil, true},
		{"shell", "a;rm slots=1\n", nil, true},
		{"option", "-oProxyCommand=x\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tc.in))
			if tc.bad {
				if err == nil || !errors.Is(err, ErrHostfile) {
					t.Fatalf("ParseHostfile(%q) = %v, %v; want ErrHostfile", tc.in, got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseHostfile(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseHostList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Host
		bad  bool
	}{
		{"a", []Host{{Name: "a", Slots: 1}}, false},
		{"a:2,b:2", []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}, false},
		{"a:2, b ,a:1", []Host{{Name: "a", Slots: 3}, {Name: "b", Slots: 1}}, false},
		{"[::1]:4,[fe80::1]", []Host{{Name: "::1", Slots: 4}, {Name: "fe80::1", Slots: 1}}, false},
		{"a:", nil, true},
		{"a:0", nil, true},
		{"a,,b", nil, true},
		{"[::1", nil, true},
		{"[::1]x", nil, true},
		{"a:b:c", nil, true},
		{"$(x):1", nil, true},
	} {
		got, err := ParseHostList(tc.in)
		if tc.bad != (err != nil) || !tc.bad && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHostList(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestPlace(t *testing.T) {
	got, err := Place([]Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 3}, {Name: "c", Slots: 4}}, 4)
	want := []Slot{{0, "a", 0, 2}, {1, "a", 1, 2}, {2, "b", 0, 2}, {3, "b", 1, 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Place = %v, %v; want %v", got, err, want)
	}
	got, err = Place(nil, 3)
	want = []Slot{{0, "", 0, 3}, {1, "", 1, 3}, {2, "", 2, 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Place(nil, 3) = %v, %v; want %v", got, err, want)
	}
	if _, err := Place([]Host{{Name: "a", Slots: 2}}, 3); !errors.Is(err, ErrUsage) {
		t.Errorf("oversubscribed Place = %v, want ErrUsage", err)
	}
	if _, err := Place(nil, 0); !errors.Is(err, ErrUsage) {
		t.Errorf("Place(nil, 0) = %v, want ErrUsage", err)
	}
}

// FuzzParseHostfile: the parser never panics, and what it accepts is safe
// to hand to an agent and places ranks consistently.
func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{"a slots=2\nb\n", "# c\nx max_slots=3 slots=1", "a;b", "[::1]", "a slots=0", "\x00", "n\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := ParseHostfile(strings.NewReader(in))
		if err != nil {
			return
		}
		total := 0
		for _, h := range hosts {
			if checkHostName(h.Name) != nil || h.Slots < 1 || h.Slots > maxSlots {
				t.Fatalf("accepted host %+v from %q", h, in)
			}
			if shellQuote(h.Name) != h.Name {
				t.Fatalf("accepted host %q needs shell quoting", h.Name)
			}
			total += h.Slots
		}
		if total == 0 {
			return
		}
		np := min(total, 64)
		slots, err := Place(hosts, np)
		if err != nil || len(slots) != np {
			t.Fatalf("Place(%v, %d) = %v, %v", hosts, np, slots, err)
		}
	})
}
