//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device (a terminal, or
// /dev/null, where the status line is harmless).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// forwardStdin reports whether gorun should read f for rank 0: pipes and
// files only, so a background gorun is never stopped reading a terminal.
func forwardStdin(f *os.File) bool { return !isTerminal(f) }

// stdioBroken reports whether gorun's stdout or stderr is a pipe whose
// reader has gone; without poll's POLLERR for that, it never says so, and
// gorun goes on when they break.
func stdioBroken() bool { return false }
