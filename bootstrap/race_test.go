//go:build race

package bootstrap

// raceEnabled: the race detector multiplies the CPU of 64 in-process
// memberlist nodes about tenfold.
const raceEnabled = true
