//go:build !amd64 || noasm

package kernels

// detect: without assembly only the reference exists.
func detect() []level { return []level{levelGeneric} }

func fill(level, *kernelSet) {}
