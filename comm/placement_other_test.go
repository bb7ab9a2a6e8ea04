//go:build !linux

package comm

// placementNs is 0, unknown, where threads cannot be pinned to a CPU.
func placementNs() float64 { return 0 }
