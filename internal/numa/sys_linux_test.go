package numa

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func skipIfNotSupported(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, ErrNotSupported) {
		t.Skipf("not checked: the kernel or sandbox refuses the call: %v", err)
	}
}

func mapPages(t *testing.T, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// numaMapsLine returns /proc/self/numa_maps's line for the mapping at p.
func numaMapsLine(t *testing.T, p unsafe.Pointer) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/numa_maps")
	if err != nil {
		t.Skipf("no /proc/self/numa_maps: %v", err)
	}
	prefix := fmt.Sprintf("%x ", uintptr(p))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no numa_maps line for %x", uintptr(p))
	return ""
}

func TestMbind(t *testing.T) {
	topo, err := System()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []int{topo.Nodes[0].ID}
	if len(topo.Nodes) > 1 {
		nodes = append(nodes, topo.Nodes[len(topo.Nodes)-1].ID)
	} else {
		t.Log("one node: binding to a second node not checked")
	}
	ps := os.Getpagesize()
	for _, node := range nodes {
		for _, mode := range []Policy{PolicyBind, PolicyPreferred} {
			m := mapPages(t, 4*ps)
			err := Mbind(m, mode, node)
			skipIfNotSupported(t, err)
			if err != nil {
				t.Fatalf("Mbind(node %d, mode %d): %v", node, mode, err)
			}
			p := unsafe.Pointer(&m[0])
			gotMode, gotNodes, err := PolicyOf(p)
			if err != nil || gotMode != mode || !reflect.DeepEqual(gotNodes, []int{node}) {
				t.Fatalf("PolicyOf = %d %v %v; want %d [%d]", gotMode, gotNodes, err, mode, node)
			}
			for i := range m {
				m[i] = 1 // first touch
			}
			if got, err := NodeOfAddr(p); err != nil || got != node {
				t.Fatalf("page on node %d (%v), want %d", got, err, node)
			}
			line := numaMapsLine(t, p)
			want := fmt.Sprintf("bind:%d", node)
			if mode == PolicyPreferred {
				want = fmt.Sprintf("prefer:%d", node)
			}
			if !strings.Contains(line, want) || !strings.Contains(line, fmt.Sprintf("N%d=4", node)) {
				t.Fatalf("numa_maps %q: want %s and N%d=4", line, want, node)
			}
		}
	}
	m := mapPages(t, ps)
	if err := Mbind(m, PolicyBind, 1000); err == nil {
		t.Fatal("Mbind to node 1000 succeeded")
	}
	if err := Mbind(m[1:], PolicyBind, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unaligned Mbind err = %v, want ErrInvalid", err)
	}
	if err := Mbind(m, PolicyBind, -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Mbind(-1) err = %v, want ErrInvalid", err)
	}
}

func TestThreadPolicy(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		// Locked and never unlocked: the thread dies with the goroutine,
		// so its policy cannot leak to other goroutines.
		runtime.LockOSThread()
		if err := SetThreadPolicy(PolicyBind, 0); err != nil {
			done <- err
			return
		}
		done <- SetThreadPolicy(PolicyDefault)
	}()
	select {
	case err := <-done:
		skipIfNotSupported(t, err)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timeout")
	}
}

func TestLockAndDontFork(t *testing.T) {
	m := mapPages(t, os.Getpagesize())
	if err := DontFork(m); err != nil {
		t.Fatal(err)
	}
	if err := Lock(m); err != nil {
		t.Logf("mlock refused (RLIMIT_MEMLOCK?): %v", err)
	}
}

func TestBindThread(t *testing.T) {
	allowed, err := ThreadAffinity()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Logf("only CPUs %v allowed: moving between CPUs not checked", allowed)
	}
	for _, cpu := range []int{allowed[0], allowed[len(allowed)-1]} {
		res := make(chan string, 1)
		go func() {
			if err := BindThread([]int{cpu}); err != nil {
				res <- err.Error()
				return
			}
			got, err := ThreadAffinity()
			if err != nil || !reflect.DeepEqual(got, []int{cpu}) {
				res <- fmt.Sprintf("affinity after BindThread([%d]) = %v, %v", cpu, got, err)
				return
			}
			if c, err := CurrentCPU(); err != nil || c != cpu {
				res <- fmt.Sprintf("running on cpu %d (%v), want %d", c, err, cpu)
				return
			}
			if n, err := CurrentNode(); err != nil || n < 0 {
				res <- fmt.Sprintf("CurrentNode = %d, %v", n, err)
				return
			}
			res <- "" // exit locked: the bound thread ends with us
		}()
		select {
		case msg := <-res:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timeout")
		}
	}
	if err := BindThread(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("BindThread(nil) err = %v", err)
	}
	if err := BindThread([]int{1 << 20}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("BindThread(huge) err = %v", err)
	}
	if after, _ := ThreadAffinity(); !reflect.DeepEqual(after, allowed) {
		t.Fatalf("test goroutine's affinity changed: %v, was %v", after, allowed)
	}
}

// TestBindProcess runs in a child process (this test binary re-run), since
// it narrows every thread of the process.
func TestBindProcess(t *testing.T) {
	if os.Getenv("NUMA_TEST_CHILD") == "bindprocess" {
		childBindProcess()
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestBindProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "NUMA_TEST_CHILD=bindprocess")
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD OK") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "CHILD OK") {
			t.Log(l)
		}
	}
}

func childBindProcess() {
	fail := func(f string, a ...any) { fmt.Printf("CHILD FAIL "+f+"\n", a...); os.Exit(1) }
	allowed, err := ThreadAffinity()
	if err != nil {
		fail("%v", err)
	}
	target := []int{allowed[len(allowed)-1]}
	if err := BindProcess(target); err != nil {
		fail("BindProcess: %v", err)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		fail("%v", err)
	}
	for _, e := range ents {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		got, err := Affinity(tid)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			fail("Affinity(%d): %v", tid, err)
		}
		if err == nil && !reflect.DeepEqual(got, target) {
			fail("thread %d affinity %v, want %v", tid, got, target)
		}
	}
	fmt.Printf("CHILD OK: %d threads bound to %v\n", len(ents), target)
	os.Exit(0)
}
