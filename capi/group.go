package main

/*
#include <stdint.h>
typedef int64_t gorun_comm;
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// gorun_comm_create_group is the C face of Comm.CreateGroup: a new
// communicator of the listed ranks of comm, made by those ranks only.
// comm stays open and usable; the new handle is freed by gorun_finalize.
// Its own bad arguments fail it on every member, naming this rank, and
// abort comm, as comm.CreateGroup's do.
//
//export gorun_comm_create_group
func gorun_comm_create_group(h C.gorun_comm, ranks *C.int, n C.int, tag C.int, out *C.gorun_comm) (rc C.int) {
	defer guard(&rc)
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	const name = "gorun_comm_create_group"
	switch {
	case out == nil:
		return refuse(c, name, errors.New("out is NULL"))
	case n <= 0:
		return refuse(c, name, errors.New("n must be at least 1 (the caller is a member)"))
	case ranks == nil:
		return refuse(c, name, errors.New("ranks is NULL with n > 0"))
	case int(n) > c.Size():
		// Some rank is repeated or out of range; and ranks may not hold n.
		return refuse(c, name, fmt.Errorf("n = %d is more than the communicator's %d ranks", int(n), c.Size()))
	}
	members := make([]int, int(n))
	for i, r := range unsafe.Slice(ranks, int(n)) {
		members[i] = int(r)
	}
	ctx, cancel := opContext()
	defer cancel()
	g, err := c.CreateGroup(ctx, members, int(tag))
	if err != nil {
		return classifyAt(c, err)
	}
	*out = C.gorun_comm(put(comms, g))
	return statusOK
}
