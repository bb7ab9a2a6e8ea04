package main

/*
#include <stdint.h>
typedef int64_t gorun_comm;
*/
import "C"

import "github.com/gorun-hpc/gorun/comm"

// The timeline from C: a caller (the torch backend) that records its own
// calls as spans, beside the collectives they become.

//export gorun_tracing
func gorun_tracing(h C.gorun_comm) C.int {
	c, _ := lookup(h)
	if c == nil || !c.Tracing() {
		return 0
	}
	return 1
}

//export gorun_trace_now
func gorun_trace_now() C.int64_t { return C.int64_t(comm.TraceNow()) }

//export gorun_trace_span
func gorun_trace_span(h C.gorun_comm, lane, name *C.char, arg, start C.int64_t) C.int {
	c, rc := lookup(h)
	if c == nil {
		return rc
	}
	if lane == nil || name == nil {
		return statusInvalid
	}
	c.TraceSpanSince(C.GoString(lane), C.GoString(name), int64(arg), int64(start))
	return statusOK
}
