package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// forwardStdin reports whether gorun should read f for rank 0: always for
// pipes and files, for a terminal only while gorun is in the foreground
// (a background gorun reading its terminal would be stopped by SIGTTIN).
func forwardStdin(f *os.File) bool {
	if !isTerminal(f) {
		return true
	}
	pgrp, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// stdioBroken reports whether gorun's stdout or stderr is a pipe or
// socket whose reader has gone (gorun ... | head), as a SIGPIPE says for
// a write to any descriptor.
func stdioBroken() bool {
	fds := []unix.PollFd{{Fd: 1}, {Fd: 2}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return false
	}
	for _, f := range fds {
		if f.Revents&unix.POLLERR != 0 {
			return true
		}
	}
	return false
}
