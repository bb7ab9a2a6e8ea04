//go:build linux

package shm

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// TestLateWriteAfterClose: a peer's write that runs after the owner closed
// the connection (the peer was frozen or slow, its post queued against the
// old key) must fail, not land in the arena range the owner has since
// given to another region. This is the shrink of TestResumedRankExpelled:
// a survivor closes its old links, frees their buffers, allocates its new
// links' in the same ranges, and the resumed rank's queued write arrives.
func TestLateWriteAfterClose(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	const n = 64 << 10
	acc := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
	old, err := db.Alloc(n, acc)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := da.Alloc(n, rdma.AccessLocalWrite)
	if err := a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, old.Addr(), old.RKey()); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusSuccess, Opcode: rdma.OpWrite})

	oldOff := old.Handle.(*mrInfo).off
	b.Close()
	if err := old.Deregister(); err != nil {
		t.Fatal(err)
	}
	reused, err := db.Alloc(n, acc)
	if err != nil {
		t.Fatal(err)
	}
	if off := reused.Handle.(*mrInfo).off; off != oldOff {
		t.Fatalf("the new region is at %#x, not the freed %#x: the test shows nothing", off, oldOff)
	}
	want := bytes.Repeat([]byte{0xa5}, n)
	copy(reused.Bytes(), want)

	// The peer's send queue runs the write it took before its freeze, as a
	// resumed process may before its socket reader sees the close.
	w := &wr{op: rdma.OpWrite, raddr: old.Addr(), rkey: old.RKey(), total: n}
	w.one[0] = rdma.SGE{Buf: src.Bytes(), MR: src}
	if st, _ := a.(*conn).remoteCopy(w, true); st != rdma.StatusRemoteAccessError {
		t.Errorf("a write by the closed connection's old key: %v, want a remote access error", st)
	}
	if !bytes.Equal(reused.Bytes(), want) {
		t.Fatal("a write through the closed connection landed in the region that reuses its range")
	}
}

// TestFrozenCopyQuarantine: a peer process stopped in the middle of a copy
// into Alloc'd memory (its in-flight counter up) may finish the copy when
// it resumes. When the owner closes the connection and frees the region,
// its range must stay out of the allocator until the peer has exited, for
// both kinds of copy: a write by key (the key table's users counter) and a
// direct send into a posted receive (the receive fence's counter).
func TestFrozenCopyQuarantine(t *testing.T) {
	for _, kind := range []string{"write", "send"} {
		t.Run(kind, func(t *testing.T) {
			dev, ln := listenOne(t, rdma.Config{Token: []byte(childToken)})
			cmd, out := startChild(t, "hang", ln.Addr().String())
			rc, err := ln.Accept(testCtx(t))
			if err != nil {
				t.Fatalf("accept: %v\nchild:\n%s", err, out)
			}
			c := rc.(*conn)
			const n = 64 << 10
			region, err := dev.Alloc(n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			info := region.Handle.(*mrInfo)
			if kind == "write" {
				c.local.slotUsers(info.slot).Add(1) // the child "is copying"
			} else {
				if err := c.PostRecv(1, region.Bytes(), region); err != nil {
					t.Fatal(err)
				}
				c.local.u32(offDirectUsers).Add(1)
			}
			cmd.Process.Signal(syscall.SIGSTOP)
			start := time.Now()
			c.Close()
			if d := time.Since(start); d < frozenPeerAfter {
				t.Fatalf("Close returned after %v: it did not wait for the copy in flight", d)
			}
			if err := region.Deregister(); err != nil {
				t.Fatal(err)
			}
			next, err := dev.Alloc(n, rdma.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			if next.Handle.(*mrInfo).off == info.off {
				t.Fatal("the range a frozen peer may still write was handed out again")
			}
			cmd.Process.Kill()
			cmd.Wait()
			after, err := dev.Alloc(n, rdma.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			if after.Handle.(*mrInfo).off != info.off {
				t.Fatalf("after the peer's exit the range %#x was not reused (got %#x)", info.off, after.Handle.(*mrInfo).off)
			}
		})
	}
}

// A write that finds its key revoked because the peer is closing the
// connection (retire, the first step of its Close, before its socket
// ends) completes flushed, as the queue does once the socket ends, and
// the connection does not fail: the receive side, which then delivers the
// peer's goodbye, judges it. Before, it failed with a remote access error,
// and a rank that was still writing when its peer closed (comm's
// TestCloseFrozenPeer/shm, 4 runs in 10) blamed the peer for a failure.
func TestWriteWhileThePeerCloses(t *testing.T) {
	a, b, da, db := pair(t, rdma.Config{})
	const n = 4 << 10
	region, err := db.Alloc(n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := da.Alloc(n, rdma.AccessLocalWrite)
	db.(*Device).retire(b.(*conn)) // b closes; its socket is still open
	if err := a.PostWrite(1, src.Bytes(), src, rdma.FlagSignaled, region.Addr(), region.RKey()); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a.GetSendComp, rdma.WC{WRID: 1, Status: rdma.StatusFlushed, Opcode: rdma.OpWrite})
	if err := a.(*conn).Err(); err != nil {
		t.Errorf("the connection failed: %v", err)
	}
	// A region deregistered while the connection stays open is still an
	// access error.
	a2, _, da2, db2 := pair(t, rdma.Config{})
	r2, err := db2.Alloc(n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	src2, _ := da2.Alloc(n, rdma.AccessLocalWrite)
	addr, key := r2.Addr(), r2.RKey()
	if err := r2.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := a2.PostWrite(2, src2.Bytes(), src2, rdma.FlagSignaled, addr, key); err != nil {
		t.Fatal(err)
	}
	mustWC(t, a2.GetSendComp, rdma.WC{WRID: 2, Status: rdma.StatusRemoteAccessError, Opcode: rdma.OpWrite})
}
