package rdmatest

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fill writes a pattern determined by seed: a pseudo-random block of 4093
// bytes repeated, with every 4 KiB boundary stamped with its page number,
// so misplaced pages and shifted bytes both show. It is cheap under -race
// (a few large copies), which matters for 64 MiB buffers.
func fill(b []byte, seed uint64) {
	const period = 4093
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n := min(len(b), period)
	for i := 0; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	for done := n; done < len(b); done *= 2 {
		copy(b[done:], b[:done])
	}
	for off := 4096; off+4 <= len(b); off += 4096 {
		binary.LittleEndian.PutUint32(b[off:], uint32(off/4096)^uint32(seed))
	}
}

// pattern returns n bytes of fill(seed).
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
