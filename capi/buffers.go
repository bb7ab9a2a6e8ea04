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
// means packed).

// need is how many elements one buffer holds on this rank.
type need struct {
	use  bool   // the call reads or writes the buffer on this rank
	n    uint64 // elements; math.MaxUint64 where the product overflowed
	what string // the arguments n comes from, for messages
	err  error  // a counts array the call needs is NULL
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
// displs is nil) describe, in elements.
func span(counts, displs []int, prefix string) need {
	if counts == nil {
		return need{use: true, err: fmt.Errorf("%scounts is NULL", prefix)}
	}
	nd := need{use: true}
	for i, k := range counts {
		c := uint64(uint(k)) // the size_t C passed
		if displs == nil {
			nd.n = plus(nd.n, c)
			nd.what = prefix + "counts"
			continue
		}
		if end := plus(uint64(uint(displs[i])), c); end > nd.n || nd.what == "" {
			nd.n = end
			nd.what = fmt.Sprintf("%sdispls[%d] = %d with %scounts[%d] = %d", prefix, i, uint(displs[i]), prefix, i, c)
		}
	}
	return nd
}

// lengths checks the buffers k uses on c's rank and sets k.sendLen and
// k.recvLen, in elements; a buffer the call ignores here becomes nil with
// length 0.
func (k *call) lengths(c *comm.Comm) error {
	size, atRoot := uint64(c.Size()), c.Rank() == k.root
	fixed := func(mult uint64) need {
		return need{use: true, n: times(k.count, mult), what: fmt.Sprintf("count %d", k.count)}
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
	case kReduce, kReduceLoc, kGather:
		send = fixed(1)
		if atRoot && k.kind == kGather {
			recv = fixed(size)
		} else if atRoot {
			recv = fixed(1)
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
	if k.sendLen, err = k.check(sendName, &k.send, send); err != nil {
		return err
	}
	k.recvLen, err = k.check(recvName, &k.recv, recv)
	return err
}

// check applies the rule to one buffer and returns its length.
func (k *call) check(which string, p *unsafe.Pointer, nd need) (int, error) {
	if !nd.use {
		*p = nil
		return 0, nil
	}
	if nd.err != nil {
		return 0, fmt.Errorf("%s: %w: %v", k.name, comm.ErrInvalid, nd.err)
	}
	if nd.n > 0 && *p == nil {
		return 0, fmt.Errorf("%s: %w: NULL buffer with a non-zero count (%s of %d elements)", k.name, comm.ErrInvalid, which, nd.n)
	}
	return int(nd.n), nil
}
