//go:build linux

package shm

import (
	"os"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// arenaMaps counts this process's mappings of shm arenas.
func arenaMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "gorun-shm-arena")
}

// TestPeerArenaMappedOnce: a process maps a peer's arena once, however
// many of its connections reach that device. Four devices of one process in
// a full mesh, plus a second connection between two of them, map four
// arenas, not 14: a 32-bit process (128 MiB arenas) ran out of address space
// with a few in-process worlds of 4 ranks (comm's TestPeersHearTheReason/shm
// on 386: "mmap: cannot allocate memory"). Writes through two connections
// land in one region, and closing every connection unmaps them all.
func TestPeerArenaMappedOnce(t *testing.T) {
	before := arenaMaps(t)
	const n = 4
	devs := make([]rdma.Device, n)
	for i := range devs {
		d, err := rdma.Open("shm")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	var conns []rdma.Conn
	connect := func(i, j int) (a, b rdma.Conn) {
		a, b = connectDevs(t, devs[i], devs[j])
		conns = append(conns, a, b)
		return a, b
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			connect(i, j)
		}
	}
	a1, _ := connect(0, 1)
	if got := arenaMaps(t) - before; got != n {
		t.Errorf("%d arena mappings for %d devices in a mesh (%d connections)", got, n, len(conns)/2)
	}

	r, err := devs[1].Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	a0 := conns[0] // 0 -> 1, the first connection
	l, err := devs[0].Alloc(4096, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(l.Bytes(), "firstsecond")
	if err := a0.PostWrite(1, l.Bytes()[:5], l, rdma.FlagSignaled, r.Addr(), r.RKey()); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a0.GetSendComp, rdma.WC{WRID: 1, Opcode: rdma.OpWrite})
	if err := a1.PostWrite(2, l.Bytes()[5:11], l, rdma.FlagSignaled, r.Addr()+5, r.RKey()); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a1.GetSendComp, rdma.WC{WRID: 2, Opcode: rdma.OpWrite})
	if got := string(r.Bytes()[:11]); got != "firstsecond" {
		t.Errorf("region holds %q, want %q", got, "firstsecond")
	}
	r.Deregister()
	l.Deregister()

	for _, c := range conns {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := arenaMaps(t) - before; got != 0 {
		t.Errorf("%d arena mappings left after closing every connection", got)
	}
}
