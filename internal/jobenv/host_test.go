package jobenv

import (
	"os"
	"strings"
	"testing"
)

func TestHostIdentity(t *testing.T) {
	a := hostIdentity("node1", "boot-a\n")
	if !strings.HasPrefix(a, "node1/") || len(a) != len("node1/")+8 {
		t.Fatalf("hostIdentity = %q, want node1/ and 8 hex digits", a)
	}
	if b := hostIdentity("node1", "boot-a"); b != a {
		t.Errorf("trailing newline of the boot id changed the identity: %q vs %q", b, a)
	}
	if b := hostIdentity("node1", "boot-b"); b == a {
		t.Errorf("same identity %q for two boot ids (a container on another machine)", a)
	}
	if b := hostIdentity("node2", "boot-a"); b == a {
		t.Errorf("same identity %q for two hostnames (a namespace host)", a)
	}
	if got := hostIdentity("", "x"); !strings.HasPrefix(got, "localhost/") {
		t.Errorf("empty hostname: %q", got)
	}
	long := hostIdentity(strings.Repeat("h", 200), "x")
	if len(long) != MaxHostIdentity {
		t.Errorf("long hostname gives %d bytes, want %d", len(long), MaxHostIdentity)
	}
	id, key := HostIdentity(), HostKey()
	if HostIdentity() != id || HostKey() != key {
		t.Error("identity not stable within a process")
	}
}

// CPUKey: equal for one kernel's CPU set whatever the hostname (namespace
// hosts compete for the same CPUs), different for another set or kernel.
func TestCPUKey(t *testing.T) {
	dir := t.TempDir()
	old := bootIDPath
	defer func() { bootIDPath = old }()
	boot := func(id string) {
		bootIDPath = dir + "/boot_id"
		if err := os.WriteFile(bootIDPath, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	boot("boot-a")
	a := CPUKey("0-1")
	if CPUKey("0-1") != a {
		t.Error("CPUKey not stable")
	}
	if CPUKey("0") == a {
		t.Error("same key for CPU sets 0-1 and 0")
	}
	boot("boot-b")
	if CPUKey("0-1") == a {
		t.Error("same key for two kernels' CPUs 0-1")
	}
}
