//go:build linux && race

package tcp

import "syscall"

// readRaw is syscall.Read under the race detector: its read records the
// acquire that pairs with the writer's raceReleaseIO, which a raw system
// call would not.
func readRaw(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }
