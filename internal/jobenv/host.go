package jobenv

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
)

// MaxHostIdentity bounds the length of HostIdentity's result.
const MaxHostIdentity = 64

// bootIDPath holds the kernel's boot id (Linux); tests replace it.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// HostIdentity names this machine for locality: the hostname plus a hash
// of the kernel boot id, "name/1a2b3c4d", at most MaxHostIdentity bytes.
// Two processes share a host exactly when their identities are equal:
// containers that share a hostname across machines have different boot
// ids, a network namespace with its own UTS namespace has its own
// hostname, and a rebooted machine is a new host.
//
// It is the only place gorun computes host identity; bootstrap metadata,
// comm's rendezvous and the launcher all ask it.
func HostIdentity() string {
	h, _ := os.Hostname()
	return hostIdentity(h, bootID())
}

// bootID is the kernel's boot id, "" where there is none (off Linux).
func bootID() string {
	boot, _ := os.ReadFile(bootIDPath)
	return strings.TrimSpace(string(boot))
}

func hostIdentity(hostname, boot string) string {
	if hostname == "" {
		hostname = "localhost"
	}
	sum := sha256.Sum256([]byte(hostname + "\x00" + strings.TrimSpace(boot)))
	if len(hostname) > MaxHostIdentity-9 {
		hostname = hostname[:MaxHostIdentity-9]
	}
	return fmt.Sprintf("%s/%x", hostname, sum[:4])
}

// CPUKey names a set of CPUs across the hosts of one machine: the kernel's
// boot id and cpus, the CPU list a process may run on. Processes with equal
// keys compete for the same CPUs, whatever hostname their UTS namespace
// gives them: ranks in network namespaces or containers of one kernel that
// the launcher counts on different hosts. Processes of one kernel with
// different but overlapping CPU sets get different keys.
func CPUKey(cpus string) [8]byte {
	sum := sha256.Sum256([]byte(bootID() + "\x00" + cpus))
	var k [8]byte
	copy(k[:], sum[:])
	return k
}

// HostKey is HostIdentity as a fixed-size key, for wire formats that
// carry it in eight bytes.
func HostKey() [8]byte {
	sum := sha256.Sum256([]byte(HostIdentity()))
	var k [8]byte
	copy(k[:], sum[:])
	return k
}
