package main

/*
#include <stdint.h>
typedef int64_t gorun_comm;
*/
import "C"

import (
	"context"
	"errors"

	"github.com/gorun-hpc/gorun/comm"
)

// Elastic jobs (gorun --elastic, --max-restarts): the C face of
// Comm.Shrink, Comm.Grow and Comm.Joiners. Shrink and Grow close the
// communicator they are called on and free its handle; *out receives the
// new one. The old handle is freed even when they fail (the communicator
// is closed either way); call gorun_init again to start over.

func remake(h C.gorun_comm, out *C.gorun_comm, name string, f func(*comm.Comm, context.Context) (*comm.Comm, error)) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	if out == nil {
		return fail(statusInvalid, errors.New("gorun_"+name+": out is NULL"))
	}
	ctx, cancel := opContext()
	defer cancel()
	nc, err := f(c, ctx)
	del(comms, int64(h))
	if err != nil {
		c.Close()
		return classify(err)
	}
	*out = C.gorun_comm(put(comms, nc))
	return statusOK
}

//export gorun_shrink
func gorun_shrink(h C.gorun_comm, out *C.gorun_comm) C.int {
	return remake(h, out, "shrink", (*comm.Comm).Shrink)
}

//export gorun_grow
func gorun_grow(h C.gorun_comm, out *C.gorun_comm) C.int {
	return remake(h, out, "grow", (*comm.Comm).Grow)
}

//export gorun_joiners
func gorun_joiners(h C.gorun_comm, out *C.int) C.int { return query(h, out, (*comm.Comm).Joiners) }
