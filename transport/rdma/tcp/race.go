//go:build race

package tcp

import "syscall"

// raceReleaseIO gives the race detector the happens-before edge that a
// socket write carries and writev does not record: syscall.Write marks it
// (and, on a bad descriptor, does nothing else). Reads record the matching
// acquire. Without it an in-process test that reads a region after the
// completion of a write into it is reported as a race.
func raceReleaseIO() { syscall.Write(-1, nil) }

const raceEnabled = true
