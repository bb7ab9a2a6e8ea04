//go:build linux

package shm

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestRingStaleWordLooksLikeStamp: the receiver takes a ring word equal to
// its position+1 for a record, and the sender does not zero the next
// record's word as a rule (stamp). Here an earlier lap left payload at
// ring offset 64 equal to the stamp the record there will carry one lap
// later; the sender must zero it before the record at offset 0 of that
// lap goes out, or the receiver reads the payload as a record.
func TestRingStaleWordLooksLikeStamp(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	src, err := da.Alloc(1024, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dstMR, err := db.Alloc(1024, rdma.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	sb, dst := src.Bytes(), dstMR.Bytes()
	id := uint64(0)
	send := func(n int, fill func(p []byte)) {
		t.Helper()
		for i := range sb[:n] {
			sb[i] = byte(id + uint64(i))
		}
		if fill != nil {
			fill(sb[:n])
		}
		want := bytes.Clone(sb[:n])
		id++
		if err := b.PostRecv(id, dst, dstMR); err != nil {
			t.Fatal(err)
		}
		if err := a.PostSend(id, sb[:n], src, rdma.FlagSignaled); err != nil {
			t.Fatal(err)
		}
		mustWC(t, a.GetSendComp, rdma.WC{WRID: id, Opcode: rdma.OpSend})
		wc := mustWC(t, b.GetRecvComp, rdma.WC{WRID: id, Opcode: rdma.OpRecv})
		if wc.ByteLen != n || !bytes.Equal(dst[:n], want) {
			t.Fatalf("send %d of %d bytes: received %d bytes, equal %v", id, n, wc.ByteLen, bytes.Equal(dst[:n], want))
		}
	}
	// Lap 1, offset 0: a 192-byte record whose payload covers offset 64
	// (payload byte 48) with the stamp of the record at offset 64 of lap 2.
	send(128, func(p []byte) { binary.LittleEndian.PutUint64(p[64-recSmallHdr:], ringSize+64+1) })
	// The rest of lap 1 in records of 1024 and then 64 bytes.
	left := ringSize - smallSize(128)
	for ; left >= 1024; left -= 1024 {
		send(1024-recSmallHdr, nil)
	}
	for ; left > 0; left -= 64 {
		send(8, nil)
	}
	// Lap 2, offset 0: a 64-byte record. The next record's word is the
	// stale payload above.
	send(8, nil)
	send(8, nil)
	send(100, nil)
}
