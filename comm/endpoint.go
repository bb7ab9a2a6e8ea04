package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// endpoint is what a rank tells the others in the rendezvous: who it is
// (host identity, pid) and where each of its providers listens.
type endpoint struct {
	host  [8]byte
	pid   uint32
	start uint64  // the process's start time in clock ticks after boot (/proc/PID/stat), 0 unknown: with pid, names the process (witness.go)
	numa  int16   // NUMA node, -1 unknown
	cpus  [8]byte // the CPUs it may run on (jobenv.CPUKey); zero unknown
	// quorum: the rank counts a quorum at Shrink and Grow (quorum.go);
	// every rank must, or none (newComm checks).
	quorum bool
	// tuning: the Sum of the rank's cost tuning (GORUN_COST_FILE,
	// WithTuning), 0 cost.go's; every rank must have the same, or they
	// could pick different algorithms (newComm checks).
	tuning uint64
	addrs  map[string]string // provider -> address
}

// hostIdentity distinguishes hosts (jobenv.HostKey).
func hostIdentity() [8]byte { return jobenv.HostKey() }

// endpointVersion 2: the NUMA node after the pid; 3: the start time after
// the NUMA node; 4: the CPU key after the start time; 5: a byte of flags
// after the CPU key (bit 0: quorum); 6: the tuning's sum after the flags.
const endpointVersion = 6

func (e *endpoint) marshal() ([]byte, error) {
	b := []byte{endpointVersion}
	b = append(b, e.host[:]...)
	b = binary.LittleEndian.AppendUint32(b, e.pid)
	b = binary.LittleEndian.AppendUint16(b, uint16(e.numa))
	b = binary.LittleEndian.AppendUint64(b, e.start)
	b = append(b, e.cpus[:]...)
	var flags byte
	if e.quorum {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, e.tuning)
	b = append(b, byte(len(e.addrs)))
	for _, name := range sortedKeys(e.addrs) {
		a := e.addrs[name]
		if len(name) > 255 || len(a) > 255 {
			return nil, fmt.Errorf("gorun: endpoint field too long")
		}
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = append(b, byte(len(a)))
		b = append(b, a...)
	}
	if len(b) > maxBlob {
		return nil, fmt.Errorf("gorun: endpoint of %d bytes exceeds %d", len(b), maxBlob)
	}
	return b, nil
}

var errBadEndpoint = errors.New("malformed endpoint")

func unmarshalEndpoint(b []byte) (*endpoint, error) {
	if len(b) < 41 || b[0] != endpointVersion {
		return nil, errBadEndpoint
	}
	e := &endpoint{addrs: map[string]string{}}
	copy(e.host[:], b[1:9])
	e.pid = binary.LittleEndian.Uint32(b[9:13])
	e.numa = int16(binary.LittleEndian.Uint16(b[13:15]))
	e.start = binary.LittleEndian.Uint64(b[15:23])
	copy(e.cpus[:], b[23:31])
	e.quorum = b[31]&1 != 0
	e.tuning = binary.LittleEndian.Uint64(b[32:40])
	n := int(b[40])
	b = b[41:]
	for range n {
		var name, addr string
		var ok bool
		if name, b, ok = lstring(b); !ok {
			return nil, errBadEndpoint
		}
		if addr, b, ok = lstring(b); !ok {
			return nil, errBadEndpoint
		}
		e.addrs[name] = addr
	}
	return e, nil
}

func lstring(b []byte) (string, []byte, bool) {
	if len(b) < 1 {
		return "", nil, false
	}
	n := 1 + int(b[0]) // int before adding: a byte 255 + 1 wraps to 0
	if len(b) < n {
		return "", nil, false
	}
	return string(b[1:n]), b[n:], true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// advertiseIP is the address tcp (and verbs) advertise: the interface
// named by GORUN_SOCKET_IFNAME, else the first up, non-loopback IPv4
// interface, else loopback.
func advertiseIP(ifname string) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1", nil
	}
	for _, ifc := range ifs {
		if ifname != "" && ifc.Name != ifname {
			continue
		}
		if ifname == "" && (ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
		if ifname != "" {
			return "", fmt.Errorf("gorun: interface %s has no IPv4 address", ifname)
		}
	}
	if ifname != "" {
		return "", fmt.Errorf("gorun: no interface %s (GORUN_SOCKET_IFNAME)", ifname)
	}
	return "127.0.0.1", nil
}
