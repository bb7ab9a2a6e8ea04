//go:build !linux

package engine

// quietSysmon is a no-op where SCHED_IDLE is not at hand (sysmon_linux.go).
func quietSysmon() int { return 0 }
