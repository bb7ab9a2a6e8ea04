package numa

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"", nil}, {"\n", nil}, {"0", []int{0}}, {"0-3,8-11\n", []int{0, 1, 2, 3, 8, 9, 10, 11}},
		{"5,1-2,2", []int{1, 2, 5}}, {"7-7", []int{7}},
	}
	for _, c := range cases {
		got, err := ParseCPUList(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if c.want != nil {
			if back, _ := ParseCPUList(FormatCPUList(got)); !reflect.DeepEqual(back, c.want) {
				t.Errorf("FormatCPUList round trip of %v: %q", got, FormatCPUList(got))
			}
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "1,,2", "1-", "0-99999999"} {
		if _, err := ParseCPUList(bad); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseCPUList(%q) err = %v, want ErrFormat", bad, err)
		}
	}
	if got := FormatCPUList([]int{11, 0, 1, 2, 3, 8, 9, 10, 5}); got != "0-3,5,8-11" {
		t.Errorf("FormatCPUList = %q", got)
	}
}

func loadFake(t *testing.T) *Topology {
	t.Helper()
	topo, err := Load("testdata/fake4")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// The fake tree: nodes 0-2 with 4 cores of 2 threads each (CPU c and c+12
// are siblings), node 3 memory-only; eth0 on node 1, mlx5_0 on node 2.
func TestLoadFake(t *testing.T) {
	topo := loadFake(t)
	if len(topo.Nodes) != 4 {
		t.Fatalf("%d nodes, want 4", len(topo.Nodes))
	}
	wantCPUs := [][]int{{0, 1, 2, 3, 12, 13, 14, 15}, {4, 5, 6, 7, 16, 17, 18, 19}, {8, 9, 10, 11, 20, 21, 22, 23}, nil}
	for i, n := range topo.Nodes {
		if n.ID != i || !reflect.DeepEqual(n.CPUs, wantCPUs[i]) {
			t.Errorf("node %d: id %d cpus %v, want %v", i, n.ID, n.CPUs, wantCPUs[i])
		}
	}
	for _, c := range []struct{ from, to, want int }{{0, 0, 10}, {0, 2, 31}, {2, 0, 31}, {3, 1, 28}, {1, 3, 28}, {0, 9, -1}, {9, 0, -1}} {
		if got := topo.Distance(c.from, c.to); got != c.want {
			t.Errorf("Distance(%d, %d) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
	for cpu, want := range map[int]int{0: 0, 15: 0, 4: 1, 19: 1, 23: 2, 24: -1, -1: -1} {
		if got := topo.NodeOfCPU(cpu); got != want {
			t.Errorf("NodeOfCPU(%d) = %d, want %d", cpu, got, want)
		}
	}
	for _, c := range []struct {
		class, name string
		want        int
	}{{"net", "eth0", 1}, {"net", "eth1", -1}, {"net", "lo", -1}, {"net", "nope", -1},
		{"infiniband", "mlx5_0", 2}, {"infiniband", "mlx5_1", -1}} {
		got := topo.NetNode(c.name)
		if c.class == "infiniband" {
			got = topo.RDMANode(c.name)
		}
		if got != c.want {
			t.Errorf("%s %s: node %d, want %d", c.class, c.name, got, c.want)
		}
	}
	if len(topo.Devices) != 4 { // lo has no device
		t.Errorf("devices %v, want eth0, eth1, mlx5_0, mlx5_1", topo.Devices)
	}
	if got := len(topo.CPUs()); got != 24 {
		t.Errorf("%d CPUs, want 24", got)
	}
}

func TestLoadFlatAndBad(t *testing.T) {
	topo, err := Load("testdata/flat")
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.Nodes) != 1 || !reflect.DeepEqual(topo.Nodes[0].CPUs, []int{0, 1, 2, 3, 4, 5}) || topo.Distance(0, 0) != 10 {
		t.Fatalf("flat topology %+v", topo.Nodes)
	}
	if _, err := Load("testdata/bad"); !errors.Is(err, ErrFormat) {
		t.Fatalf("Load(bad) err = %v, want ErrFormat", err)
	}
	var oe *OpError
	if _, err := Load("testdata/bad"); !errors.As(err, &oe) || oe.Arg == "" {
		t.Fatalf("Load(bad) err = %#v, want an *OpError naming the file", err)
	}
}

func TestCPUSetFor(t *testing.T) {
	topo := loadFake(t)
	cases := []struct {
		rank, size int
		mode       BindMode
		want       []int
	}{
		{0, 4, BindNone, nil},
		// 12 cores (3 nodes × 4), 4 ranks: 3 cores each, both threads.
		{0, 4, BindCore, []int{0, 1, 2, 12, 13, 14}},
		{1, 4, BindCore, []int{3, 4, 5, 15, 16, 17}},
		{3, 4, BindCore, []int{9, 10, 11, 21, 22, 23}},
		// 5 ranks: 2 cores each, 2 cores unused.
		{4, 5, BindCore, []int{8, 9, 20, 21}},
		// 13 ranks on 12 cores: round-robin.
		{12, 13, BindCore, []int{0, 12}},
		// bind-to numa: 3 nodes with CPUs; node 3 is memory-only.
		{0, 2, BindNUMA, []int{0, 1, 2, 3, 12, 13, 14, 15}},
		{1, 2, BindNUMA, []int{4, 5, 6, 7, 16, 17, 18, 19}},
		{5, 6, BindNUMA, []int{8, 9, 10, 11, 20, 21, 22, 23}},
		{2, 3, BindNUMA, []int{8, 9, 10, 11, 20, 21, 22, 23}},
	}
	for _, c := range cases {
		got, err := topo.CPUSetFor(c.rank, c.size, c.mode)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("CPUSetFor(%d, %d, %s) = %v, %v; want %v", c.rank, c.size, c.mode, got, err, c.want)
		}
	}
	// Core blocks never overlap while ranks <= cores.
	for size := 1; size <= 12; size++ {
		seen := map[int]int{}
		for r := range size {
			cpus, err := topo.CPUSetFor(r, size, BindCore)
			if err != nil || len(cpus) == 0 {
				t.Fatalf("size %d rank %d: %v %v", size, r, cpus, err)
			}
			for _, c := range cpus {
				if o, ok := seen[c]; ok {
					t.Fatalf("size %d: cpu %d given to ranks %d and %d", size, c, o, r)
				}
				seen[c] = r
			}
		}
	}
	for _, bad := range [][2]int{{-1, 2}, {2, 2}, {0, 0}} {
		if _, err := topo.CPUSetFor(bad[0], bad[1], BindCore); !errors.Is(err, ErrInvalid) {
			t.Errorf("CPUSetFor(%d, %d) err = %v, want ErrInvalid", bad[0], bad[1], err)
		}
	}
	if _, err := topo.CPUSetFor(0, 1, BindMode(9)); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad mode err = %v", err)
	}
	for s, want := range map[string]BindMode{"": BindNone, "none": BindNone, "core": BindCore, "numa": BindNUMA} {
		if m, err := ParseBindMode(s); err != nil || m != want || (s != "" && m.String() != s) {
			t.Errorf("ParseBindMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseBindMode("socket"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseBindMode(socket) err = %v", err)
	}
}

func TestSystem(t *testing.T) {
	topo, err := System()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this machine: %d node(s); devices %v", len(topo.Nodes), topo.Devices)
	for _, n := range topo.Nodes {
		t.Logf("node %d: cpus %s distance %v", n.ID, FormatCPUList(n.CPUs), n.Distance)
	}
	if len(topo.Nodes) < 2 {
		t.Log("single node: multi-node placement is checked only on the fake tree (TestLoadFake, TestCPUSetFor)")
	}
	cpus := topo.CPUs()
	if len(cpus) == 0 || !slices.IsSorted(cpus) {
		t.Fatalf("CPUs() = %v", cpus)
	}
	if _, err := topo.CPUSetFor(0, 1, BindNUMA); err != nil {
		t.Fatal(err)
	}
}
