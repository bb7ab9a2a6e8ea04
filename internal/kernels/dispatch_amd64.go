//go:build !noasm

package kernels

import "github.com/klauspost/cpuid/v2"

// detect lists the levels the CPU and the OS support (cpuid checks that the
// OS saves the AVX and AVX-512 registers).
func detect() []level {
	l := []level{levelGeneric}
	if cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.F16C) {
		l = append(l, levelAVX2)
		if cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512DQ, cpuid.AVX512VL) {
			l = append(l, levelAVX512)
		}
	}
	return l
}

func fill(l level, s *kernelSet) {
	switch l {
	case levelAVX2:
		setAVX2(s)
	case levelAVX512:
		setAVX512(s)
	}
}
