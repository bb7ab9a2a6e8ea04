//go:build !race

package engine

// raceFence is needed only under the race detector. The engine's sleep
// protocol is Dekker's: Run stores sleeping, then looks at the links;
// dispatch stores a link's state, then loads sleeping; one of the two must
// see the other. Run's side is atomic's Store of sleeping, sequentially
// consistent (on amd64 an XCHG); dispatch's side is wakeEngine's
// fullFence, since the link's counters are release stores. Under the
// race detector a Store is ThreadSanitizer's release store, a plain MOV
// that a later load may pass (golang/go#58020): a wake-up could be lost
// there, and only there.
func raceFence() {}
