//go:build race

package bootstrap

// raceEnabled: the race detector slows gossip ~10×; tests of large
// in-process worlds shrink under it.
const raceEnabled = true
