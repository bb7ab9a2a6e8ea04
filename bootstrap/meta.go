package bootstrap

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Limits of the node metadata. memberlist caps a node's meta at
// memberlist.MetaMaxSize (512) bytes; the worst case of the encoding below
// is metaFixedMax + MaxBlob = 464 bytes.
const (
	MaxBlob  = 320 // transport endpoints published by comm
	MaxJobID = 64
	MaxHost  = 64

	metaVersion  = 1
	metaFixedMax = 2 + 5 + 5 + (1 + MaxJobID) + (1 + MaxHost) + 2
)

// meta flag bits.
const (
	flagLeaving   = 1 << 0 // the node is closing; its departure is not a crash
	flagForming   = 1 << 1 // with flagLeaving: it leaves before its first world formed (formloss.go)
	flagJoining   = 1 << 2 // a restarted rank not yet admitted (jobGone, agree.go)
	flagAbandoned = 1 << 3 // with flagLeaving: it gives up on its formed world (abandon.go)
	flagBehind    = 1 << 4 // the job went on without it (expel.go): never a joiner
	knownFlags    = flagLeaving | flagForming | flagJoining | flagAbandoned | flagBehind
)

// meta is what every node publishes in its memberlist node meta.
//
// Encoding, version 1 (all integers unsigned LEB128 varints, rank zig-zag):
//
//	version byte (=1) | flags byte (1: leaving, 2: leaving unformed, 4: joining, 8: abandoning, 16: behind) | rank (zig-zag, -1 = unassigned) |
//	size | len(job) job | len(host) host | len(blob) blob
//
// Decoding is strict: unknown versions, unknown flags, out-of-range values
// non-minimal varints and trailing bytes are errors.
type meta struct {
	Rank    int // -1 when unassigned
	Size    int
	JobID   string
	Host    string
	Leaving bool
	Forming bool // leaving before its first world formed: its Form failed
	Joining bool // restarted (Config.Restarted) and not yet admitted to a world
	// Abandoned: leaving, it gives up on its formed world (Node.Abandon).
	Abandoned bool
	// Behind: a member told it of a world without it that the job went on
	// in rather than its own (expel.go); it is not a joiner (Joiners).
	Behind bool
	Blob   []byte
}

func (m *meta) encode() ([]byte, error) {
	switch {
	case len(m.Blob) > MaxBlob:
		return nil, fmt.Errorf("%w: blob is %d bytes, limit %d", ErrMetaTooLarge, len(m.Blob), MaxBlob)
	case len(m.JobID) > MaxJobID:
		return nil, fmt.Errorf("%w: job id is %d bytes, limit %d", ErrMetaTooLarge, len(m.JobID), MaxJobID)
	case len(m.Host) > MaxHost:
		return nil, fmt.Errorf("%w: host identity is %d bytes, limit %d", ErrMetaTooLarge, len(m.Host), MaxHost)
	case m.Rank < -1 || m.Rank > math.MaxInt32 || m.Size < 0 || m.Size > math.MaxInt32:
		return nil, fmt.Errorf("%w: rank %d or size %d out of range", ErrBadMeta, m.Rank, m.Size)
	}
	b := make([]byte, 0, metaFixedMax+len(m.Blob))
	var flags byte
	if m.Leaving {
		flags |= flagLeaving
	}
	if m.Forming {
		flags |= flagForming
	}
	if m.Joining {
		flags |= flagJoining
	}
	if m.Abandoned {
		flags |= flagAbandoned
	}
	if m.Behind {
		flags |= flagBehind
	}
	b = append(b, metaVersion, flags)
	b = binary.AppendVarint(b, int64(m.Rank))
	b = binary.AppendUvarint(b, uint64(m.Size))
	b = appendString(b, m.JobID)
	b = appendString(b, m.Host)
	b = appendString(b, string(m.Blob))
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeMeta parses buf; it never panics, whatever buf holds.
func decodeMeta(buf []byte) (meta, error) {
	var m meta
	d := decoder{buf: buf}
	if len(buf) < 2 {
		return m, fmt.Errorf("%w: %d bytes", ErrBadMeta, len(buf))
	}
	if buf[0] != metaVersion {
		return m, fmt.Errorf("%w: version %d", ErrMetaVersion, buf[0])
	}
	flags := buf[1]
	if flags&^knownFlags != 0 {
		return m, fmt.Errorf("%w: unknown flags %#x", ErrBadMeta, flags)
	}
	d.buf = buf[2:]
	rank := d.varint()
	if rank < -1 || rank > math.MaxInt32 {
		d.fail("rank out of range")
	}
	m.Rank = int(rank)
	m.Leaving = flags&flagLeaving != 0
	m.Forming = flags&flagForming != 0
	m.Joining = flags&flagJoining != 0
	m.Abandoned = flags&flagAbandoned != 0
	m.Behind = flags&flagBehind != 0
	m.Size = int(d.uvarint(math.MaxInt32))
	m.JobID = string(d.bytes(MaxJobID))
	m.Host = string(d.bytes(MaxHost))
	m.Blob = d.bytes(MaxBlob)
	if d.err == nil && len(d.buf) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return meta{}, d.err
	}
	return m, nil
}

// metaJob returns the job id field of an encoded meta without copying
// it, or false if buf is not a version-1 meta up to that field. memberlist
// calls the alive delegate for every alive message, duplicates included,
// with its node lock held; this is the cheap check for that path.
func metaJob(buf []byte) ([]byte, bool) {
	if len(buf) < 2 || buf[0] != metaVersion {
		return nil, false
	}
	d := decoder{buf: buf[2:]}
	d.varint()
	d.uvarint(math.MaxInt32)
	n := d.uvarint(MaxJobID)
	job := d.fixed(int(n))
	return job, d.err == nil
}

// decoder reads fields until the first error, which sticks.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadMeta, what)
	}
	d.buf = nil
}

func (d *decoder) uvarint(max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 || v > max || overlong(d.buf, n) {
		d.fail("bad unsigned varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 || overlong(d.buf, n) {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// overlong reports a varint of n bytes whose last byte adds nothing: the
// encoding must be canonical, so that a meta has one byte form.
func overlong(b []byte, n int) bool { return n > 1 && b[n-1] == 0 }

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.buf) < n {
		d.fail("truncated")
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) bytes(max int) []byte {
	n := d.uvarint(uint64(max))
	if d.err != nil {
		return nil
	}
	b := d.fixed(int(n))
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
