package reliability

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// snapshot is what a process holds that Close must give back: goroutines
// (keyed by the function that started them), open file descriptors (by
// target) and memfd mappings.
type snapshot struct {
	goroutines map[string]int
	fds        map[string]int
	memfdMaps  int
}

// ignoredGoroutines start once per process and stay (runtime, signals).
var ignoredGoroutines = []string{"os/signal.", "runtime.", "testing."}

func takeSnapshot() snapshot {
	s := snapshot{goroutines: map[string]int{}, fds: map[string]int{}}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s.goroutines[goroutineKey(string(g))]++
	}
	delete(s.goroutines, "")
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own fd, already closed
		}
		s.fds[fdKind(target)]++
	}
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil {
		s.memfdMaps = bytes.Count(maps, []byte("/memfd:"))
	}
	return s
}

// goroutineKey names a goroutine by its creator ("created by X") or, for
// main, its bottom frame; "" for goroutines that are always there.
func goroutineKey(stack string) string {
	lines := strings.Split(strings.TrimSpace(stack), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
		return ""
	}
	key := ""
	for i, l := range lines {
		if strings.HasPrefix(l, "created by ") {
			key = strings.TrimPrefix(l, "created by ")
			if j := strings.Index(key, " in goroutine"); j >= 0 {
				key = key[:j]
			}
			break
		}
		if i == 1 {
			key = l // the top frame, for goroutines with no creator
		}
	}
	if strings.Contains(lines[0], "[running]") && strings.Contains(stack, "takeSnapshot") {
		return "" // the caller
	}
	for _, p := range ignoredGoroutines {
		if strings.HasPrefix(key, p) {
			return ""
		}
	}
	return key
}

// fdKind groups descriptors: sockets and pipes by kind, memfds as one
// kind, files by path.
func fdKind(target string) string {
	switch {
	case strings.HasPrefix(target, "socket:"):
		return "socket"
	case strings.HasPrefix(target, "pipe:"):
		return "pipe"
	case strings.HasPrefix(target, "anon_inode:"):
		return target
	case strings.HasPrefix(target, "/memfd:"):
		return "memfd"
	}
	return target
}

// leaksSince compares the process with base, retrying for up to within
// (goroutines and sockets take a moment to wind down after Close), and
// describes what is still held beyond base, or "" when nothing is, and how
// long it waited.
func leaksSince(base snapshot, within time.Duration) (string, time.Duration) {
	start := time.Now()
	deadline := start.Add(within)
	for {
		now := takeSnapshot()
		var leaks []string
		for k, n := range now.goroutines {
			if n > base.goroutines[k] {
				leaks = append(leaks, fmt.Sprintf("%d goroutine(s) started by %s", n-base.goroutines[k], k))
			}
		}
		for k, n := range now.fds {
			if n > base.fds[k] {
				leaks = append(leaks, fmt.Sprintf("%d fd(s) %s", n-base.fds[k], k))
			}
		}
		if now.memfdMaps > base.memfdMaps {
			leaks = append(leaks, fmt.Sprintf("%d memfd mapping(s)", now.memfdMaps-base.memfdMaps))
		}
		if len(leaks) == 0 {
			return "", time.Since(start)
		}
		if time.Now().After(deadline) {
			slices.Sort(leaks)
			return strings.Join(leaks, "; "), time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
