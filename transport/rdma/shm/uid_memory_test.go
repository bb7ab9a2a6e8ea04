//go:build linux

package shm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/internal/testuser"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// memoryProbe is run by python3 against this process: it tries every way
// a local process has to the registered memory of another one, and prints
// one line per way: "NAME ok HEX" (it read the memory) or "NAME denied ...".
// Argument: pid, then addr:len of each region.
const memoryProbe = `import ctypes,os,sys
pid=int(sys.argv[1])
libc=ctypes.CDLL(None,use_errno=True)
class iovec(ctypes.Structure):
    _fields_=[("base",ctypes.c_void_p),("len",ctypes.c_size_t)]
for i,spec in enumerate(sys.argv[2:]):
    a,n=(int(x) for x in spec.split(":"))
    buf=ctypes.create_string_buffer(n)
    l=iovec(ctypes.cast(buf,ctypes.c_void_p),n); r=iovec(a,n)
    got=libc.process_vm_readv(pid,ctypes.byref(l),1,ctypes.byref(r),1,0)
    if got==n: print("vm_readv%d ok %s"%(i,buf.raw[:16].hex()))
    else: print("vm_readv%d denied errno %d"%(i,ctypes.get_errno()))
    try:
        f=open("/proc/%d/mem"%pid,"rb"); f.seek(a); d=f.read(16); print("mem%d ok %s"%(i,d.hex()))
    except Exception as e: print("mem%d denied %s"%(i,e))
try:
    for fd in os.listdir("/proc/%d/fd"%pid):
        try:
            f=open("/proc/%d/fd/%s"%(pid,fd),"rb")
            if "memfd" in os.readlink("/proc/%d/fd/%s"%(pid,fd)): print("fd ok memfd opened")
        except Exception: pass
    print("fdlist ok")
except Exception as e: print("fdlist denied %s"%e)
try:
    os.listdir("/proc/%d/map_files"%pid); print("map_files ok")
except Exception as e: print("map_files denied %s"%e)
`

// TestRegisteredMemoryUnreachableByOtherUID: a process of another uid on
// the same host cannot read a job's registered memory, neither the arena
// (Alloc: a memfd, passed to peers only after the SO_PEERCRED check) nor a
// registered Go buffer: not with process_vm_readv (CMA), /proc/PID/mem,
// the memfd through /proc/PID/fd, or /proc/PID/map_files. The same probe
// run as this process's own user reads both, so the probe can tell.
func TestRegisteredMemoryUnreachableByOtherUID(t *testing.T) {
	cred := testuser.Credential(t)
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no python3 for the foreign process")
	}
	dev, err := rdma.OpenConfig("shm", rdma.Config{Token: []byte("s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	secret := []byte("gorun-secret-0123456789abcdef")
	arena, err := dev.Alloc(4096, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(arena.Bytes(), secret)
	heap := bytes.Repeat(secret, 4)
	reg, err := dev.Register(heap, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-c", memoryProbe, strconv.Itoa(os.Getpid())}
	for _, mr := range []*rdma.MR{arena, reg} {
		args = append(args, fmt.Sprintf("%d:%d", mr.Addr(), len(secret)))
	}
	want := fmt.Sprintf("%x", secret[:16])

	own, err := exec.Command(py, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("probe as own user: %v\n%s", err, own)
	}
	for _, line := range []string{"vm_readv0 ok " + want, "vm_readv1 ok " + want, "mem0 ok " + want} {
		if !strings.Contains(string(own), line) {
			t.Fatalf("the probe as this process's own user should read the memory (%q):\n%s", line, own)
		}
	}

	cmd := exec.Command(py, args...)
	cmd.SysProcAttr = cred
	other, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe as uid %d: %v\n%s", cred.Credential.Uid, err, other)
	}
	t.Logf("probe as uid %d:\n%s", cred.Credential.Uid, other)
	for _, line := range strings.Split(strings.TrimSpace(string(other)), "\n") {
		if strings.Contains(line, " ok") || strings.Contains(line, want) {
			t.Errorf("uid %d reached the job's memory: %s", cred.Credential.Uid, line)
		}
	}
	for _, way := range []string{"vm_readv0 denied", "vm_readv1 denied", "mem0 denied", "mem1 denied", "fdlist denied", "map_files denied"} {
		if !strings.Contains(string(other), way) {
			t.Errorf("no %q from the probe as uid %d", way, cred.Credential.Uid)
		}
	}
}
