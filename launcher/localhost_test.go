package launcher

import (
	"net"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// Names of this machine (localhost, 127.0.0.0/8, ::1, its host name, its
// addresses) are one host: their slots add up at the first one's place,
// and its ranks are numbered 0..n-1 together, as Open MPI does.
func TestNamesOfThisMachineAreOneHost(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"localhost:1,node1:2,127.0.0.2:1,[::1]:1," + name + ":1"} {
		got, err := ParseHostList(in)
		if want := []Host{{Name: "localhost", Slots: 4}, {Name: "node1", Slots: 2}}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseHostList(%q) = %v, %v; want %v", in, got, err, want)
		}
		file := strings.ReplaceAll(strings.NewReplacer("[", "", "]", "").Replace(in), ",", "\n")
		file = strings.NewReplacer(":1\n", " slots=1\n", ":2\n", " slots=2\n").Replace(file + "\n")
		got, err = ParseHostfile(strings.NewReader(file))
		if want := []Host{{Name: "localhost", Slots: 4}, {Name: "node1", Slots: 2}}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseHostfile(%q) = %v, %v; want %v", file, got, err, want)
		}
	}
	// An address of one of this machine's interfaces, not a loopback one.
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				got, err := ParseHostList("localhost:1," + n.IP.String() + ":1")
				if want := []Host{{Name: "localhost", Slots: 2}}; err != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("ParseHostList(localhost and %s) = %v, %v; want %v", n.IP, got, err, want)
				}
				break
			}
		}
	}
	// Hosts given as a Config's, unparsed, by slot and by node.
	slots, err := Place([]Host{{Name: "localhost", Slots: 2}, {Name: "127.0.0.1", Slots: 2}}, 4)
	want := []Slot{{0, "localhost", 0, 4}, {1, "localhost", 1, 4}, {2, "localhost", 2, 4}, {3, "localhost", 3, 4}}
	if err != nil || !reflect.DeepEqual(slots, want) {
		t.Errorf("Place(localhost:2, 127.0.0.1:2) = %v, %v; want %v", slots, err, want)
	}
	slots, err = PlaceBy([]Host{{Name: "localhost", Slots: 2}, {Name: "node1", Slots: 2}, {Name: "127.0.0.1", Slots: 2}}, 6, "node")
	want = []Slot{{0, "localhost", 0, 4}, {1, "node1", 0, 2}, {2, "localhost", 1, 4}, {3, "node1", 1, 2},
		{4, "localhost", 2, 4}, {5, "localhost", 3, 4}}
	if err != nil || !reflect.DeepEqual(slots, want) {
		t.Errorf("PlaceBy(localhost:2, node1:2, 127.0.0.1:2, node) = %v, %v; want %v", slots, err, want)
	}
}

// A job on localhost:2,127.0.0.1:2 numbers its ranks as one host's
// (GORUN_LOCAL_RANK 0-3 of 4, not 0,1,0,1 of 2), and --bind-to core
// gives two ranks on two names of this machine different CPUs.
func TestLocalNamesRunAsOneHost(t *testing.T) {
	out, stderr, err := runJob(t, "env", Config{NP: 4, Hosts: []Host{{Name: "localhost", Slots: 2}, {Name: "127.0.0.1", Slots: 2}}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	for r, lines := range rankLines(t, out) {
		var local []string
		for _, l := range lines {
			if strings.HasPrefix(l, EnvLocalRank+"=") || strings.HasPrefix(l, EnvLocalSize+"=") {
				local = append(local, l)
			}
		}
		sort.Strings(local)
		if want := []string{EnvLocalRank + "=" + string(rune('0'+r)), EnvLocalSize + "=4"}; !reflect.DeepEqual(local, want) {
			t.Errorf("rank %d: %v, want %v", r, local, want)
		}
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: two ranks cannot be bound apart")
	}
	out, stderr, err = runJob(t, "affinity", Config{NP: 2, Bind: "core", Hosts: []Host{{Name: "localhost", Slots: 1}, {Name: "127.0.0.1", Slots: 1}}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	cpus := rankLines(t, out)
	if len(cpus[0]) != 1 || len(cpus[1]) != 1 || cpus[0][0] == cpus[1][0] || strings.Contains(stderr, "share cores") {
		t.Errorf("--bind-to core on localhost:1,127.0.0.1:1: rank 0 on CPUs %v, rank 1 on %v, want one set each, apart\n%s", cpus[0], cpus[1], stderr)
	}
}
