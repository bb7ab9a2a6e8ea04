package rdmatest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// orphanEnv makes the test binary a parent that starts a conformance
// child, prints its pid and waits to be killed.
const orphanEnv = "GORUN_RDMATEST_ORPHAN_PARENT"

func orphanParent() int {
	rp, err := startChild("mem")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := rp.Listen(rdma.Config{}, "x"); err != nil { // the child serves
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(rp.pid)
	time.Sleep(time.Minute)
	return 0
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestChildDiesWithParent kills a parent that has a conformance child with
// SIGKILL, so it cannot clean up, and checks that the child goes too
// (through Pdeathsig or EOF on its control pipe, whichever comes first; a
// zombie left for a non-reaping init counts as gone).
func TestChildDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux-only")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !alive(pid) {
		t.Fatalf("child pid %q: %v (alive %v)", line, err, alive(pid))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("conformance child %d outlived its parent by 10s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
