package numa

import (
	"errors"
	"fmt"
)

var (
	// ErrNotSupported: the OS, the kernel or a sandbox (seccomp) lacks the call.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalid: an argument is out of range (a CPU, a node, a rank, a mode).
	ErrInvalid = errors.New("invalid argument")
	// ErrFormat: a sysfs file does not parse.
	ErrFormat = errors.New("malformed sysfs data")
)

// OpError is the error of a numa call: Op is the call, Arg what it was
// given (a path, a node, a CPU list), Err the sentinel or errno beneath.
type OpError struct {
	Op  string
	Arg string
	Err error
}

func (e *OpError) Error() string {
	if e.Arg == "" {
		return "numa: " + e.Op + ": " + e.Err.Error()
	}
	return "numa: " + e.Op + " " + e.Arg + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

func opErr(op string, arg any, err error) error {
	return &OpError{Op: op, Arg: fmt.Sprint(arg), Err: err}
}
