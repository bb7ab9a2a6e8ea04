package comm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// Too many ranks for one process: a clear error at once, nothing started.
func TestBoundsTooManyRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewLocal(ctx, maxLocalRanks+1)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "at most 4096") {
		t.Fatalf("NewLocal(%d) = %v, want ErrLimit naming the bound", maxLocalRanks+1, err)
	}
}

// A descriptor limit too low for the tcp connections: NewLocal fails at
// once naming RLIMIT_NOFILE and how to raise it (it used to run out of
// descriptors part-way through connecting).
func TestBoundsDescriptors(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	const n = 8
	low := rl
	low.Cur = uint64(openFDs() + n*collectives.MaxInitPeers(n)/2)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, n, WithTransport("tcp"))
	for _, c := range cs {
		c.Close()
	}
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("NewLocal(%d, tcp) with RLIMIT_NOFILE %d = %v, want ErrLimit naming RLIMIT_NOFILE", n, low.Cur, err)
	}
}

func TestCheckFDs(t *testing.T) {
	if err := checkFDs(100, 4, 10, 1024); err != nil {
		t.Fatal(err)
	}
	if err := checkFDs(1000, 4, 10, 0); err != nil { // unknown limit
		t.Fatal(err)
	}
	if err := checkFDs(1000, 4, 10, 1024); !errors.Is(err, ErrLimit) {
		t.Fatalf("checkFDs = %v", err)
	}
	if err := limitHint(syscall.EMFILE); !errors.Is(err, ErrLimit) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("limitHint(EMFILE) = %v", err)
	}
}

// fakeMem points availableMemory at files written under a temporary
// directory: meminfo's MemAvailable (kB; "" none), and the cgroup lines.
func fakeMem(t *testing.T, availKB, cgroup string, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	old := memFiles
	t.Cleanup(func() { memFiles = old })
	memFiles.meminfo = filepath.Join(dir, "meminfo")
	memFiles.cgroup = filepath.Join(dir, "cgroup")
	memFiles.cgroupRoot = filepath.Join(dir, "sys")
	meminfo := "MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
	if availKB != "" {
		meminfo += "MemAvailable:   " + availKB + " kB\n"
	}
	write := func(path, s string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(memFiles.meminfo, meminfo)
	write(memFiles.cgroup, cgroup)
	for name, s := range files {
		write(filepath.Join(memFiles.cgroupRoot, name), s)
	}
}

func TestAvailableMemory(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name, availKB, cgroup string
		files                 map[string]string
		want                  float64
		what                  string // a part of what names the bound
		ok                    bool
	}{
		{"meminfo only", "4194304", "", nil, 4 * gib, "MemAvailable", true},
		{"nothing", "", "", nil, 0, "", false},
		{"v2 limit below", "4194304", "0::/job.slice/x\n",
			map[string]string{"job.slice/x/memory.max": "2147483648\n", "job.slice/x/memory.current": "1073741824\n"}, 1 * gib, "memory.max", true},
		{"v2 limit above", "4194304", "0::/x\n",
			map[string]string{"x/memory.max": "17179869184\n", "x/memory.current": "0\n"}, 4 * gib, "MemAvailable", true},
		{"v2 no limit", "4194304", "0::/x\n",
			map[string]string{"x/memory.max": "max\n", "x/memory.current": "5\n"}, 4 * gib, "MemAvailable", true},
		{"v2 over its limit", "4194304", "0::/x\n",
			map[string]string{"x/memory.max": "1000\n", "x/memory.current": "2000\n"}, 0, "memory.max", true},
		{"v1 limit", "4194304", "9:name=systemd:/\n4:memory:/process_api/x\n0::/\n",
			map[string]string{"memory/process_api/x/memory.limit_in_bytes": "536870912\n", "memory/process_api/x/memory.usage_in_bytes": "268435456\n"}, gib / 4, "limit_in_bytes", true},
		{"v1 no limit", "4194304", "4:cpuacct,memory:/x\n",
			map[string]string{"memory/x/memory.limit_in_bytes": "9223372036854771712\n", "memory/x/memory.usage_in_bytes": "5\n"}, 4 * gib, "MemAvailable", true},
		{"v1 limit, no meminfo", "", "4:memory:/x\n",
			map[string]string{"memory/x/memory.limit_in_bytes": "536870912\n", "memory/x/memory.usage_in_bytes": "0\n"}, gib / 2, "limit_in_bytes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeMem(t, tc.availKB, tc.cgroup, tc.files)
			got, what, ok := availableMemory()
			if ok != tc.ok || got != tc.want || !strings.Contains(what, tc.what) {
				t.Fatalf("availableMemory() = %v, %q, %v; want %v, naming %q, %v", got, what, ok, tc.want, tc.what, tc.ok)
			}
		})
	}
}

// A world too large for the memory available fails at once with ErrLimit
// naming the bound and what to do; one that fits forms.
func TestBoundsMemory(t *testing.T) {
	fakeMem(t, "65536", "", nil) // 64 MiB
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := NewLocal(ctx, 256)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MemAvailable") || !strings.Contains(err.Error(), "fewer ranks") {
		t.Fatalf("NewLocal(256) with 64 MiB available = %v, want ErrLimit naming MemAvailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused after %v", d)
	}
	cs, err := NewLocal(ctx, 4)
	if err != nil {
		t.Fatalf("NewLocal(4) with 64 MiB available: %v", err)
	}
	for _, c := range cs {
		c.Close()
	}
}

// makeMemCgroup makes a memory cgroup of limit bytes under this process's
// own (cgroup v1 or v2), removed when the test ends; it returns the file
// a process's id is written to, to move it in.
func makeMemCgroup(t *testing.T, limit int64) (procs string, err error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var dir, limitFile string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		switch {
		case len(f) != 3:
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.limit_in_bytes"
		case f[0] == "0" && f[1] == "" && dir == "":
			ctl, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", f[2], "cgroup.subtree_control"))
			if err == nil && slices.Contains(strings.Fields(string(ctl)), "memory") {
				dir, limitFile = filepath.Join("/sys/fs/cgroup", f[2]), "memory.max"
			}
		}
	}
	if dir == "" {
		return "", errors.New("no memory controller in /proc/self/cgroup")
	}
	dir = filepath.Join(dir, fmt.Sprintf("gorun-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return "", err
	}
	return filepath.Join(dir, "cgroup.procs"), nil
}

// A world too large for its memory met the kernel's OOM killer before
// checkMemory. Real: a child process in a memory cgroup of 384 MiB asks
// for 1,024 ranks (about 2.4 GiB) and gets ErrLimit naming the cgroup's
// limit; 16 ranks form in the same cgroup.
func TestBoundsMemoryCgroup(t *testing.T) {
	if arg := os.Getenv("GORUN_MEMCG_CHILD"); arg != "" {
		n, _ := strconv.Atoi(arg)
		bufio.NewReader(os.Stdin).ReadString('\n') // moved into the cgroup
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := NewLocal(ctx, n)
		for _, c := range cs {
			c.Close()
		}
		fmt.Printf("MEMCG limit=%v err=%v\n", errors.Is(err, ErrLimit), err)
		return
	}
	procs, err := makeMemCgroup(t, 384<<20)
	if err != nil {
		t.Skipf("no memory cgroup to make here (not root, or no memory controller): %v", err)
	}
	for _, tc := range []struct {
		n      int
		refuse bool
	}{{1024, true}, {16, false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBoundsMemoryCgroup$")
		cmd.Env = append(os.Environ(), "GORUN_MEMCG_CHILD="+strconv.Itoa(tc.n))
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Skipf("cannot move a process into the cgroup: %v", err)
		}
		in.Write([]byte("go\n"))
		in.Close()
		err = cmd.Wait()
		switch s := out.String(); {
		case err != nil:
			t.Fatalf("NewLocal(%d) in a 384 MiB cgroup: the child ended with %v (the OOM killer?)\n%s", tc.n, err, s)
		case tc.refuse && (!strings.Contains(s, "MEMCG limit=true") || !strings.Contains(s, "limit")):
			t.Fatalf("NewLocal(%d) in a 384 MiB cgroup: want ErrLimit naming the cgroup's limit\n%s", tc.n, s)
		case !tc.refuse && !strings.Contains(s, "MEMCG limit=false err=<nil>"):
			t.Fatalf("NewLocal(%d) in a 384 MiB cgroup: want it formed\n%s", tc.n, s)
		default:
			t.Logf("NewLocal(%d): %s", tc.n, strings.TrimSpace(s))
		}
	}
}
