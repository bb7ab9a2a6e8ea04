package verbs

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DeviceInfo describes an RDMA device as sysfs shows it.
type DeviceInfo struct {
	Name     string // e.g. "mlx5_0", "rxe0"
	NodeGUID string
	NodeType string // e.g. "1: CA"
	NUMANode int    // -1 when unknown (software devices, single-node hosts)
	Ports    []PortInfo
}

// PortInfo is one port of a device.
type PortInfo struct {
	Num       int
	State     string // "ACTIVE", "DOWN", "INIT", ...
	LinkLayer string // "InfiniBand" or "Ethernet"
	GIDs      []GID  // non-zero entries of the GID table
}

// GID is one entry of a port's GID table.
type GID struct {
	Index  int
	GID    net.IP // 16 bytes
	Type   string // "IB/RoCE v1", "RoCE v2" (empty if sysfs does not say)
	NetDev string // the Ethernet device of a RoCE GID
}

// Active reports whether the port can carry traffic.
func (p PortInfo) Active() bool { return p.State == "ACTIVE" }

// Usable reports whether the device has an active port.
func (d DeviceInfo) Usable() bool {
	for _, p := range d.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// Devices lists the host's RDMA devices from /sys/class/infiniband. A host
// without RDMA has none (and no error).
func Devices() ([]DeviceInfo, error) { return DevicesAt("/") }

// DevicesAt is Devices with sysfs read below root (for tests with a fake
// tree: root/sys/class/infiniband/<dev>/...).
func DevicesAt(root string) ([]DeviceInfo, error) {
	base := filepath.Join(root, "sys", "class", "infiniband")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var devs []DeviceInfo
	for _, e := range ents {
		dir := filepath.Join(base, e.Name())
		d := DeviceInfo{
			Name:     e.Name(),
			NodeGUID: readString(filepath.Join(dir, "node_guid")),
			NodeType: readString(filepath.Join(dir, "node_type")),
		}
		d.NUMANode = numaNode(root, e.Name())
		d.Ports = readPorts(filepath.Join(dir, "ports"))
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

// numaNode is the device's NUMA node, or -1 when sysfs does not say.
func numaNode(root, dev string) int {
	n, err := strconv.Atoi(readString(filepath.Join(root, "sys", "class", "infiniband", dev, "device", "numa_node")))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// hasActivePort reads only the ports' state files (Devices also reads the
// GID tables, which is slow on devices with large ones).
func hasActivePort(root, dev string) bool {
	states, _ := filepath.Glob(filepath.Join(root, "sys", "class", "infiniband", dev, "ports", "*", "state"))
	for _, p := range states {
		if strings.HasSuffix(readString(p), "ACTIVE") {
			return true
		}
	}
	return false
}

// firstIPv4GID is the IPv4 address of the first IPv4-mapped (RoCE) GID of
// an active port of dev, or nil. It stops at the first hit, so it reads a
// few files where Devices reads the whole table.
func firstIPv4GID(root, dev string) net.IP {
	ports, _ := filepath.Glob(filepath.Join(root, "sys", "class", "infiniband", dev, "ports", "*"))
	for _, p := range ports {
		if !strings.HasSuffix(readString(filepath.Join(p, "state")), "ACTIVE") {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(p, "gids"))
		if err != nil {
			continue
		}
		for i := 0; i < len(ents); i++ {
			ip := parseGID(readString(filepath.Join(p, "gids", strconv.Itoa(i))))
			if v4 := ip.To4(); v4 != nil && !v4.IsUnspecified() {
				return v4
			}
		}
	}
	return nil
}

func readPorts(dir string) []PortInfo {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ports []PortInfo
	for _, e := range ents {
		num, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pdir := filepath.Join(dir, e.Name())
		p := PortInfo{Num: num, LinkLayer: readString(filepath.Join(pdir, "link_layer"))}
		// "4: ACTIVE"
		st := readString(filepath.Join(pdir, "state"))
		if i := strings.IndexByte(st, ':'); i >= 0 {
			st = strings.TrimSpace(st[i+1:])
		}
		p.State = st
		p.GIDs = readGIDs(pdir)
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i].Num < ports[j].Num })
	return ports
}

func readGIDs(pdir string) []GID {
	ents, err := os.ReadDir(filepath.Join(pdir, "gids"))
	if err != nil {
		return nil
	}
	var gids []GID
	for _, e := range ents {
		idx, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ip := parseGID(readString(filepath.Join(pdir, "gids", e.Name())))
		if ip == nil || ip.IsUnspecified() {
			continue
		}
		gids = append(gids, GID{
			Index:  idx,
			GID:    ip,
			Type:   readString(filepath.Join(pdir, "gid_attrs", "types", e.Name())),
			NetDev: readString(filepath.Join(pdir, "gid_attrs", "ndevs", e.Name())),
		})
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

// parseGID parses sysfs's "fe80:0000:0000:0000:0202:c9ff:fe00:0001" form.
func parseGID(s string) net.IP {
	if strings.Count(s, ":") != 7 {
		return nil
	}
	return net.ParseIP(s).To16()
}

// readString returns the trimmed content of a small sysfs file, or "" (sysfs
// reads fail with EINVAL for some attributes of inactive ports).
func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
