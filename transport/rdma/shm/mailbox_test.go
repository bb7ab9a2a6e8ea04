//go:build linux

package shm

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The mailbox promise (rdma.Mailbox): both areas are MailboxBytes long,
// aligned and zeroed; what one side stores in its Out, the other reads in
// its In, in each direction, and the two directions are apart; both sides
// agree whether the writer's side may be plain; GORUN_SHM_MAILBOX=0
// withholds them.
func TestMailbox(t *testing.T) {
	a, b, _, _ := pair(t, rdma.Config{})
	ma, ok := a.(rdma.Mailbox)
	if !ok {
		t.Fatal("shm conn is not an rdma.Mailbox")
	}
	mb := b.(rdma.Mailbox)
	ain, aout := ma.Mailbox()
	bin, bout := mb.Mailbox()
	for name, m := range map[string][]byte{"a.in": ain, "a.out": aout, "b.in": bin, "b.out": bout} {
		if len(m) != rdma.MailboxBytes || uintptrOf(m)%64 != 0 {
			t.Fatalf("%s: %d bytes at %#x; want %d, 64-byte aligned", name, len(m), uintptrOf(m), rdma.MailboxBytes)
		}
		if !bytes.Equal(m, make([]byte, len(m))) {
			t.Fatalf("%s is not zeroed", name)
		}
	}
	copy(aout, "to b")
	copy(bout[100:], "to a")
	if string(bin[:4]) != "to b" || string(ain[100:104]) != "to a" {
		t.Fatalf("b reads %q, a reads %q", bin[:4], ain[100:104])
	}
	if ain[0] != 0 || bin[100] != 0 {
		t.Fatal("a write reached the writer's own In")
	}
	if ma.MailboxFenced() != mb.MailboxFenced() || ma.SleepFence() != ma.MailboxFenced() {
		t.Fatalf("fenced: a %v (SleepFence %v), b %v", ma.MailboxFenced(), ma.SleepFence(), mb.MailboxFenced())
	}

	t.Setenv("GORUN_SHM_MAILBOX", "0")
	c, _, _, _ := pair(t, rdma.Config{})
	if in, out := c.(rdma.Mailbox).Mailbox(); in != nil || out != nil {
		t.Fatal("GORUN_SHM_MAILBOX=0: the conn still offers mailboxes")
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
