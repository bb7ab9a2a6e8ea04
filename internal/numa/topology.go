package numa

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Topology is the machine's NUMA layout as sysfs shows it.
type Topology struct {
	// Nodes are the online nodes, by ascending ID. A memory-only node
	// (CXL, HBM) has no CPUs.
	Nodes []Node
	// Devices are the network interfaces backed by a device and the RDMA
	// devices, with their nodes.
	Devices []Device

	cpuNode map[int]int // CPU -> node
	cpuCore map[int]int // CPU -> the first CPU of its core (thread siblings)
}

// Node is one NUMA node.
type Node struct {
	ID   int
	CPUs []int
	// Distance maps a node ID to the relative access cost from this node
	// (10 is local, as in the ACPI SLIT).
	Distance map[int]int
}

// Device is a network interface (Class "net") or an RDMA device (Class
// "infiniband") and its NUMA node, -1 when the platform does not say.
type Device struct {
	Class string
	Name  string
	Node  int
}

// System loads the running machine's topology.
func System() (*Topology, error) { return Load("/") }

// Load reads the topology under root, a directory laid out like / (its
// sys/devices/system/node, sys/devices/system/cpu, sys/class/net and
// sys/class/infiniband). Without a node directory the machine is one node
// 0 holding every online CPU.
func Load(root string) (*Topology, error) {
	t := &Topology{cpuNode: map[int]int{}, cpuCore: map[int]int{}}
	nodeDir := filepath.Join(root, "sys/devices/system/node")
	ents, err := os.ReadDir(nodeDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cpus, err := onlineCPUs(root)
		if err != nil {
			return nil, err
		}
		t.Nodes = []Node{{ID: 0, CPUs: cpus, Distance: map[int]int{0: 10}}}
	case err != nil:
		return nil, opErr("load", nodeDir, err)
	default:
		for _, e := range ents {
			id, ok := strings.CutPrefix(e.Name(), "node")
			n, err := strconv.Atoi(id)
			if !ok || err != nil {
				continue
			}
			cpus, err := readList(filepath.Join(nodeDir, e.Name(), "cpulist"))
			if err != nil {
				return nil, err
			}
			t.Nodes = append(t.Nodes, Node{ID: n, CPUs: cpus})
		}
		slices.SortFunc(t.Nodes, func(a, b Node) int { return a.ID - b.ID })
		if len(t.Nodes) == 0 {
			return nil, opErr("load", nodeDir, ErrFormat)
		}
		if err := t.loadDistances(nodeDir); err != nil {
			return nil, err
		}
	}
	for _, n := range t.Nodes {
		for _, c := range n.CPUs {
			t.cpuNode[c] = n.ID
			t.cpuCore[c] = c
		}
	}
	t.loadCores(root)
	for _, class := range []string{"net", "infiniband"} {
		if err := t.loadDevices(root, class); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// loadDistances reads each node's distance file: one number per online
// node, in ascending node order.
func (t *Topology) loadDistances(nodeDir string) error {
	for i := range t.Nodes {
		n := &t.Nodes[i]
		n.Distance = map[int]int{}
		p := filepath.Join(nodeDir, "node"+strconv.Itoa(n.ID), "distance")
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			n.Distance[n.ID] = 10
			continue
		}
		if err != nil {
			return opErr("load", p, err)
		}
		f := strings.Fields(string(b))
		if len(f) != len(t.Nodes) {
			return opErr("load", p, ErrFormat)
		}
		for j, s := range f {
			d, err := strconv.Atoi(s)
			if err != nil {
				return opErr("load", p, ErrFormat)
			}
			n.Distance[t.Nodes[j].ID] = d
		}
	}
	return nil
}

// loadCores groups CPUs that are hardware threads of one core, from
// cpuN/topology/thread_siblings_list; without it each CPU is its own core.
func (t *Topology) loadCores(root string) {
	for c := range t.cpuNode {
		p := filepath.Join(root, "sys/devices/system/cpu", "cpu"+strconv.Itoa(c), "topology/thread_siblings_list")
		sib, err := readList(p)
		if err != nil || len(sib) == 0 {
			continue
		}
		t.cpuCore[c] = sib[0]
	}
}

func (t *Topology) loadDevices(root, class string) error {
	dir := filepath.Join(root, "sys/class", class)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return opErr("load", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name(), "device/numa_node")
		b, err := os.ReadFile(p)
		if err != nil {
			continue // virtual interface (lo, bridges): no device
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return opErr("load", p, ErrFormat)
		}
		if n < -1 || (n >= 0 && !t.hasNode(n)) {
			n = -1 // a node we do not know: treat as unknown
		}
		t.Devices = append(t.Devices, Device{Class: class, Name: e.Name(), Node: n})
	}
	return nil
}

func onlineCPUs(root string) ([]int, error) {
	cpus, err := readList(filepath.Join(root, "sys/devices/system/cpu/online"))
	if errors.Is(err, fs.ErrNotExist) {
		cpus = make([]int, runtime.NumCPU())
		for i := range cpus {
			cpus[i] = i
		}
		return cpus, nil
	}
	return cpus, err
}

func readList(p string) ([]int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, opErr("load", p, err)
	}
	l, err := ParseCPUList(string(b))
	if err != nil {
		return nil, opErr("load", p, ErrFormat)
	}
	return l, nil
}

func (t *Topology) hasNode(id int) bool {
	for _, n := range t.Nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

// Node returns the node with the given ID.
func (t *Topology) Node(id int) (Node, bool) {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// NodeOfCPU returns the node of a CPU, or -1 if the CPU is not online.
func (t *Topology) NodeOfCPU(cpu int) int {
	if n, ok := t.cpuNode[cpu]; ok {
		return n
	}
	return -1
}

// Distance is the relative cost of node from reaching node to (10 local),
// or -1 if either is unknown.
func (t *Topology) Distance(from, to int) int {
	n, ok := t.Node(from)
	if !ok {
		return -1
	}
	if d, ok := n.Distance[to]; ok {
		return d
	}
	return -1
}

// CPUs returns every online CPU, ascending.
func (t *Topology) CPUs() []int {
	var c []int
	for _, n := range t.Nodes {
		c = append(c, n.CPUs...)
	}
	slices.Sort(c)
	return c
}

// NetNode returns the node of network interface ifname (e.g. "eth0"), or
// -1 if it is virtual, unknown, or the platform does not say.
func (t *Topology) NetNode(ifname string) int { return t.deviceNode("net", ifname) }

// RDMANode returns the node of RDMA device dev (e.g. "mlx5_0"), or -1.
func (t *Topology) RDMANode(dev string) int { return t.deviceNode("infiniband", dev) }

func (t *Topology) deviceNode(class, name string) int {
	for _, d := range t.Devices {
		if d.Class == class && d.Name == name {
			return d.Node
		}
	}
	return -1
}
