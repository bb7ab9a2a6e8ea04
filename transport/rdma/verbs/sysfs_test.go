package verbs

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// writeTree creates files under root from a path → content map.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDevicesAtFakeSysfs(t *testing.T) {
	root := t.TempDir()
	ib := "sys/class/infiniband/"
	writeTree(t, root, map[string]string{
		ib + "rxe0/node_guid":                         "5054:00ff:fe12:3456\n",
		ib + "rxe0/node_type":                         "1: CA\n",
		ib + "rxe0/ports/1/state":                     "4: ACTIVE\n",
		ib + "rxe0/ports/1/link_layer":                "Ethernet\n",
		ib + "rxe0/ports/1/gids/0":                    "fe80:0000:0000:0000:5054:00ff:fe12:3456\n",
		ib + "rxe0/ports/1/gids/1":                    "0000:0000:0000:0000:0000:ffff:0a00:020f\n",
		ib + "rxe0/ports/1/gids/2":                    "0000:0000:0000:0000:0000:0000:0000:0000\n",
		ib + "rxe0/ports/1/gid_attrs/types/0":         "IB/RoCE v1\n",
		ib + "rxe0/ports/1/gid_attrs/types/1":         "RoCE v2\n",
		ib + "rxe0/ports/1/gid_attrs/ndevs/1":         "eth0\n",
		ib + "mlx5_0/device/numa_node":                "1\n",
		ib + "mlx5_0/ports/1/state":                   "1: DOWN\n",
		ib + "mlx5_0/ports/1/link_layer":              "InfiniBand\n",
		ib + "mlx5_0/ports/2/state":                   "4: ACTIVE\n",
		ib + "mlx5_0/ports/2/gids/0":                  "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n",
		ib + "mlx5_0/ports/not-a-port/state":          "4: ACTIVE\n",
		ib + "mlx5_0/ports/2/gids/3":                  "garbage\n",
		ib + "broken0/ports/1/gid_attrs/types/unused": "",
	})
	devs, err := DevicesAt(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 || devs[0].Name != "broken0" || devs[1].Name != "mlx5_0" || devs[2].Name != "rxe0" {
		t.Fatalf("devices %+v", devs)
	}
	mlx, rxe := devs[1], devs[2]
	if mlx.NUMANode != 1 || rxe.NUMANode != -1 {
		t.Errorf("NUMA nodes %d %d, want 1 -1", mlx.NUMANode, rxe.NUMANode)
	}
	if len(mlx.Ports) != 2 || mlx.Ports[0].Active() || !mlx.Ports[1].Active() || !mlx.Usable() {
		t.Errorf("mlx5_0 ports %+v", mlx.Ports)
	}
	if ip := firstIPv4GID(root, "rxe0"); !ip.Equal(net.ParseIP("10.0.2.15")) {
		t.Errorf("firstIPv4GID(rxe0) = %v", ip)
	}
	if ip := firstIPv4GID(root, "mlx5_0"); ip != nil {
		t.Errorf("firstIPv4GID(mlx5_0) = %v, want nil", ip)
	}
	if !hasActivePort(root, "mlx5_0") || hasActivePort(root, "broken0") {
		t.Error("hasActivePort disagrees with Usable")
	}
	if devs[0].Usable() {
		t.Error("broken0 is usable")
	}
	if len(mlx.Ports[1].GIDs) != 1 {
		t.Errorf("mlx5_0 port 2 GIDs %+v (garbage entry must be skipped)", mlx.Ports[1].GIDs)
	}
	p := rxe.Ports[0]
	if p.Num != 1 || p.State != "ACTIVE" || p.LinkLayer != "Ethernet" || rxe.NodeType != "1: CA" {
		t.Errorf("rxe0 port %+v", p)
	}
	if len(p.GIDs) != 2 {
		t.Fatalf("rxe0 GIDs %+v, want 2 (zero GID skipped)", p.GIDs)
	}
	g := p.GIDs[1]
	if g.Index != 1 || g.Type != "RoCE v2" || g.NetDev != "eth0" || !g.GID.Equal(net.ParseIP("10.0.2.15")) {
		t.Errorf("RoCE v2 GID %+v", g)
	}
}

func TestDevicesAtNoRDMA(t *testing.T) {
	devs, err := DevicesAt(t.TempDir())
	if err != nil || len(devs) != 0 {
		t.Fatalf("DevicesAt(empty) = %v, %v", devs, err)
	}
}

// TestDevicesHost only checks that the real sysfs can be read.
func TestDevicesHost(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("%s numa=%d usable=%v ports=%+v", d.Name, d.NUMANode, d.Usable(), d.Ports)
	}
}
