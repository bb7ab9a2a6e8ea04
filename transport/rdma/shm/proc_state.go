//go:build linux

package shm

import (
	"bytes"
	"os"
	"strconv"
)

// peerStopped reports whether process pid is in the stopped or traced
// state (/proc/PID/stat): frozen, not merely slow.
func peerStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // the command may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
}
