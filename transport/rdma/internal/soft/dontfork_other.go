//go:build !linux

package soft

// dontFork: only Linux has MADV_DONTFORK. Elsewhere a child keeps a
// copy-on-write view of m, which gorun's providers never rely on.
func dontFork(m []byte) {}
