//go:build cgo

package main

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/gorun-hpc/gorun/comm"
)

// The buffers of every entry point, checked by one rule before the call
// starts: a buffer the call reads or writes on this rank may be NULL only
// when it holds no elements; one the call ignores on this rank (recv off
// the root of reduce, gather and their _loc and v forms; send off the
// root of scatter and scatterv) may be anything and is not looked at. The
// counts arrays of the v-collectives follow the same rule (displs NULL
// means packed). A used buffer holds at most maxBytes: a larger count, or
// a product of count, size and element size that overflows, is refused
// naming the count.

// maxBytes bounds one buffer: 2^47 bytes (128 TiB) on 64-bit systems,
// half of the most Go allocates there (2^48 on amd64 and arm64), and
// math.MaxInt on 32-bit ones. A larger count describes no memory this
// process has: unsafe.Slice panics on some (SIZE_MAX, a product that
// overflows) and comm would run past the end of the others.
const maxBytes = min(1<<47, math.MaxInt)

// need is how many elements one buffer holds on this rank, and which
// arguments say so (for messages).
type need struct {
	use    bool   // the call reads or writes the buffer on this rank
	n      uint64 // elements; math.MaxUint64 where the sum or product overflowed
	count  uint64 // the count n comes from
	index  int    // -1: the call's count; else counts[index] of a v-collective
	displ  uint64 // displs[index], where displs is given
	displs bool
	prefix string // "send_", "recv_" or ""
	null   bool   // a counts array the call needs is NULL
}

func (nd need) what() string {
	switch {
	case nd.index < 0:
		return fmt.Sprintf("count %d", nd.count)
	case nd.displs:
		return fmt.Sprintf("%sdispls[%d] = %d with %scounts[%d] = %d", nd.prefix, nd.index, nd.displ, nd.prefix, nd.index, nd.count)
	}
	return fmt.Sprintf("%scounts[%d] = %d", nd.prefix, nd.index, nd.count)
}

// times is a*b, or math.MaxUint64 where that overflows.
func times(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// plus is a+b, or math.MaxUint64 where that overflows.
func plus(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// span is the buffer a v-collective's counts and displs (packed when
// displs is nil) describe, in elements; its what names the largest count
// (packed) or the block that ends last.
func span(counts, displs []int, prefix string) need {
	nd := need{use: true, null: counts == nil, prefix: prefix, displs: displs != nil}
	for i, k := range counts {
		c := uint64(uint(k)) // the size_t C passed
		if displs == nil {
			nd.n = plus(nd.n, c)
			if c >= nd.count {
				nd.index, nd.count = i, c
			}
			continue
		}
		if d := uint64(uint(displs[i])); plus(d, c) >= nd.n {
			nd.n, nd.index, nd.count, nd.displ = plus(d, c), i, c, d
		}
	}
	return nd
}

// lengths checks the buffers k uses on c's rank and sets k.sendLen and
// k.recvLen, in elements of elem bytes; a buffer the call ignores here
// becomes nil with length 0.
func (k *call) lengths(c *comm.Comm, elem int) error {
	size, atRoot := uint64(c.Size()), c.Rank() == k.root
	fixed := func(mult uint64) need {
		return need{use: true, n: times(k.count, mult), count: k.count, index: -1}
	}
	var send, recv need // zero: ignored
	switch k.kind {
	case kAllReduce, kScan, kExScan, kAllReduceLoc:
		send, recv = fixed(1), fixed(1)
	case kBroadcast, kRecv:
		recv = fixed(1)
	case kSend:
		send = fixed(1)
	case kAllGather:
		send, recv = fixed(1), fixed(size)
	case kReduceScatter:
		send, recv = fixed(size), fixed(1)
	case kAllToAll:
		send, recv = fixed(size), fixed(size)
	case kReduce, kReduceLoc:
		send = fixed(1)
		if atRoot {
			recv = fixed(1)
		}
	case kGather:
		send = fixed(1)
		if atRoot {
			recv = fixed(size)
		}
	case kScatter:
		recv = fixed(1)
		if atRoot {
			send = fixed(size)
		}
	case kAllGatherV:
		send, recv = fixed(1), span(k.counts, k.displs, "")
	case kGatherV:
		send = fixed(1)
		if atRoot {
			recv = span(k.counts, k.displs, "")
		}
	case kScatterV:
		recv = fixed(1)
		if atRoot {
			send = span(k.counts, k.displs, "")
		}
	case kAllToAllV:
		send, recv = span(k.counts, k.displs, "send_"), span(k.rcounts, k.rdispls, "recv_")
	}
	sendName, recvName := "send", "recv"
	if k.kind == kBroadcast || k.kind == kSend || k.kind == kRecv {
		sendName, recvName = "buf", "buf"
	}
	var err error
	if k.sendLen, err = k.check(sendName, &k.send, send, elem); err != nil {
		return err
	}
	k.recvLen, err = k.check(recvName, &k.recv, recv, elem)
	return err
}

// check applies the rule to one buffer and returns its length.
func (k *call) check(which string, p *unsafe.Pointer, nd need, elem int) (int, error) {
	if !nd.use {
		*p = nil
		return 0, nil
	}
	if nd.null {
		return 0, fmt.Errorf("%scounts is NULL", nd.prefix)
	}
	if nd.n > uint64(maxBytes/elem) {
		return 0, fmt.Errorf("%s out of range: %s would hold more than %d bytes", nd.what(), which, maxBytes)
	}
	if nd.n > 0 && *p == nil {
		return 0, fmt.Errorf("NULL buffer with a non-zero count (%s of %d elements)", which, nd.n)
	}
	return int(nd.n), nil
}
