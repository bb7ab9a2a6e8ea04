package soft

import "golang.org/x/sys/unix"

// dontFork keeps m out of children (MADV_DONTFORK), as registered memory
// must be: a fork would otherwise copy-on-write the pages under a peer.
func dontFork(m []byte) { _ = unix.Madvise(m, unix.MADV_DONTFORK) }
