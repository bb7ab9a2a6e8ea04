package main

/*
#include <stddef.h>
#include <stdint.h>
typedef int64_t gorun_comm;
typedef int64_t gorun_request;

void gorun_set_error(char *msg);
const char *gorun_get_error(void);
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/internal/jobenv"
)

// Status codes, as in gorun.h.
const (
	statusOK       = 0
	statusInvalid  = 1
	statusPeer     = 2
	statusTimeout  = 3
	statusClosed   = 4
	statusInit     = 5
	statusInternal = 6
	statusJobGone  = 7
	statusNoQuorum = 8
)

var statusText = [...]string{
	statusOK:       "success",
	statusInvalid:  "invalid argument",
	statusPeer:     "a peer rank failed or disagreed",
	statusTimeout:  "timed out",
	statusClosed:   "communicator closed or aborted",
	statusInit:     "could not join the job",
	statusInternal: "internal error",
	statusJobGone:  "restarted after the job's other ranks were gone",
	statusNoQuorum: "this side of the job keeps no majority of its ranks",
}

var cStatusText = func() []*C.char {
	out := make([]*C.char, len(statusText))
	for i, s := range statusText {
		out[i] = C.CString(s) // lives for the process, as strerror's do
	}
	return out
}()

var unknownStatus = C.CString("unknown status")

var (
	mu     sync.Mutex
	comms  = map[int64]*comm.Comm{}
	nextID int64
)

func put[V any](m map[int64]V, v V) int64 {
	mu.Lock()
	defer mu.Unlock()
	nextID++
	m[nextID] = v
	return nextID
}

func get[V any](m map[int64]V, id int64) (V, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := m[id]
	return v, ok
}

func del[V any](m map[int64]V, id int64) {
	mu.Lock()
	defer mu.Unlock()
	delete(m, id)
}

// opContext bounds every blocking call by GORUN_TIMEOUT, read as comm
// reads it (jobenv.OpTimeout: default 5 minutes, seconds or a duration, 0
// disables). A bad value was already refused by gorun_init (comm.Init).
func opContext() (context.Context, context.CancelFunc) {
	d, _, err := jobenv.OpTimeout(os.Getenv)
	if err != nil {
		d = jobenv.DefaultTimeout
	}
	return opContextFor(d)
}

func opContextFor(d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), d)
}

// fail records err as the thread's last error and maps it to a status.
func fail(status int, err error) C.int {
	C.gorun_set_error(C.CString(err.Error()))
	return C.int(status)
}

// classify maps an error from comm to a status code.
func classify(err error) C.int {
	if err == nil {
		return statusOK
	}
	status := statusInternal
	var re *comm.RankError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		status = statusTimeout
	case errors.Is(err, comm.ErrNoQuorum):
		status = statusNoQuorum
	case errors.Is(err, comm.ErrDeviceFailed):
		// This rank's own device, not a peer: NCCL's ncclSystemError.
		status = statusInternal
	case errors.As(err, &re):
		status = statusPeer
	case errors.Is(err, comm.ErrClosed):
		status = statusClosed
	case errors.Is(err, comm.ErrInvalid):
		status = statusInvalid
	}
	return fail(status, err)
}

// guard turns a panic into statusInternal: a library must not crash its host.
func guard(rc *C.int) {
	if p := recover(); p != nil {
		*rc = fail(statusInternal, fmt.Errorf("gorun: internal error: %v", p))
	}
}

func lookup(h C.gorun_comm) (*comm.Comm, C.int) {
	c, ok := get(comms, int64(h))
	if !ok {
		return nil, fail(statusInvalid, fmt.Errorf("gorun: no communicator with handle %d", int64(h)))
	}
	return c, statusOK
}

//export gorun_init
func gorun_init(out *C.gorun_comm) (rc C.int) {
	defer guard(&rc)
	if out == nil {
		return fail(statusInvalid, errors.New("gorun_init: comm is NULL"))
	}
	ctx, cancel := opContext()
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		return fail(initStatus(err), err)
	}
	*out = C.gorun_comm(put(comms, c))
	return statusOK
}

// abiVersion is include/gorun.h's GORUN_ABI_VERSION, the version of the
// C ABI this library exports (TestABIVersion holds the two together).
const abiVersion = 1

//export gorun_abi_version
func gorun_abi_version() C.int { return abiVersion }

//export gorun_launched
func gorun_launched() C.int {
	if comm.Launched() {
		return 1
	}
	return 0
}

// initStatus is gorun_init's status for err: GORUN_ERR_JOB_GONE where a
// rank gorun restarted found none of the job's other ranks left to admit
// it (comm.ErrJobGone: the job ended without it, which the application
// may take as done), GORUN_ERR_INIT otherwise.
func initStatus(err error) int {
	if errors.Is(err, comm.ErrJobGone) {
		return statusJobGone
	}
	return statusInit
}

//export gorun_finalize
func gorun_finalize(h C.gorun_comm) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	del(comms, int64(h))
	return classify(c.Close())
}

//export gorun_abort
func gorun_abort(h C.gorun_comm, reason *C.char) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	msg := "aborted by the application"
	if reason != nil {
		msg = C.GoString(reason)
	}
	c.Abort(errors.New(msg))
	return statusOK
}

func query(h C.gorun_comm, out *C.int, f func(*comm.Comm) int) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	if out == nil {
		return fail(statusInvalid, errors.New("gorun: output pointer is NULL"))
	}
	*out = C.int(f(c))
	return statusOK
}

//export gorun_rank
func gorun_rank(h C.gorun_comm, out *C.int) C.int { return query(h, out, (*comm.Comm).Rank) }

//export gorun_size
func gorun_size(h C.gorun_comm, out *C.int) C.int { return query(h, out, (*comm.Comm).Size) }

//export gorun_local_rank
func gorun_local_rank(h C.gorun_comm, out *C.int) C.int {
	return query(h, out, (*comm.Comm).LocalRank)
}

//export gorun_local_size
func gorun_local_size(h C.gorun_comm, out *C.int) C.int {
	return query(h, out, (*comm.Comm).LocalSize)
}

//export gorun_strerror
func gorun_strerror(status C.int) *C.char {
	if status >= 0 && int(status) < len(cStatusText) {
		return cStatusText[status]
	}
	return unknownStatus
}

//export gorun_last_error
func gorun_last_error() *C.char { return C.gorun_get_error() }

//export gorun_barrier
func gorun_barrier(h C.gorun_comm) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	ctx, cancel := opContext()
	defer cancel()
	return classifyAt(c, c.Barrier(ctx))
}

// gorun_refuse is comm.Refuse for a binding over this ABI (the Python
// package, the torch backend) that refuses a call's arguments itself,
// before it calls gorun: op fails on every rank, naming this one, instead
// of leaving the ranks whose arguments passed to wait for it until their
// timeout; comm is aborted. The message naming this rank becomes the
// thread's last error.
//
//export gorun_refuse
func gorun_refuse(h C.gorun_comm, op, why *C.char) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	name, reason := "call", "refused by the caller"
	if op != nil {
		name = C.GoString(op)
	}
	if why != nil {
		reason = C.GoString(why)
	}
	refuse(c, name, errors.New(reason))
	return statusOK
}
