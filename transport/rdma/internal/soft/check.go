package soft

import (
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// MaxSGE is the longest scatter-gather list the software providers accept.
const MaxSGE = 32

// CheckLocal validates the local buffers of a request at post time: each
// non-empty buffer must lie inside a valid MR of pd with access need, unless
// inline is set and the total fits maxInline. It returns the total length.
func CheckLocal(pd *PD, sgl []rdma.SGE, need rdma.Access, flags rdma.Flags, maxInline int) (int, error) {
	if len(sgl) > MaxSGE {
		return 0, rdma.ErrInvalid
	}
	total := 0
	for _, s := range sgl {
		total += len(s.Buf)
	}
	if flags&rdma.FlagInline != 0 && need&rdma.AccessLocalWrite == 0 {
		if total > maxInline {
			return 0, rdma.ErrInvalid
		}
		return total, nil
	}
	for _, s := range sgl {
		if len(s.Buf) == 0 {
			continue
		}
		if s.MR == nil || s.MR.Owner() != pd || !s.MR.Valid() || !s.MR.Covers(s.Buf) {
			return 0, rdma.ErrNotRegistered
		}
		if s.MR.Access()&need != need {
			return 0, rdma.ErrAccess
		}
	}
	return total, nil
}

// AcquireAll counts an outstanding request on every MR of sgl. On false
// nothing is held (a region was deregistered concurrently).
func AcquireAll(sgl []rdma.SGE) bool {
	for i, s := range sgl {
		if s.MR == nil || len(s.Buf) == 0 {
			continue
		}
		if !s.MR.Acquire() {
			ReleaseAll(sgl[:i])
			return false
		}
	}
	return true
}

// ReleaseAll undoes AcquireAll.
func ReleaseAll(sgl []rdma.SGE) {
	for _, s := range sgl {
		if s.MR != nil && len(s.Buf) > 0 {
			s.MR.Release()
		}
	}
}

// One returns a one-entry scatter-gather list for buf, reusing dst's array.
func One(dst *[1]rdma.SGE, buf []byte, mr *rdma.MR) []rdma.SGE {
	dst[0] = rdma.SGE{Buf: buf, MR: mr}
	return dst[:]
}
