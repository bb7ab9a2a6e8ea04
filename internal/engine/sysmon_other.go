//go:build !linux

package engine

// slowSysmon is a no-op where the thread's timer slack is not at hand
// (sysmon_linux.go).
func slowSysmon() int { return 0 }
