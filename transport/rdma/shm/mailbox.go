//go:build linux

package shm

import (
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The mailbox (rdma.Mailbox): an area of each side's segment that the
// other side writes. Both processes map both segments for the life of the
// connection, so a store into Out is a store into the peer's memory, and
// the areas stay mapped until Close (which unmaps them: the caller stops
// using them first). The flag protocol's barriers are the doorbells'
// (fence.go): plain stores on the writer's side where both processes
// fence their sleeps with membarrier.

var _ rdma.Mailbox = (*conn)(nil)

// Mailbox returns this side's area (in) and the peer's (out), or nothing
// where GORUN_SHM_MAILBOX=0.
func (c *conn) Mailbox() (in, out []byte) {
	if !c.dev.mailbox {
		return nil, nil
	}
	return c.local.mailbox(), c.peer.mailbox()
}

// SleepFence is the sleeper's barrier: membarrier where both processes
// fence (it then reaches the writer's CPU), else a full barrier of this
// CPU alone.
func (c *conn) SleepFence() bool {
	if c.plainRing {
		sleepFence()
		return true
	}
	fullFence()
	return false
}

// MailboxFenced reports whether SleepFence reaches the writer's CPU.
func (c *conn) MailboxFenced() bool { return c.plainRing }

// fenceWord is what fullFence's locked exchange works on.
var fenceWord atomic.Uint32

// fullFence is a full barrier of this CPU (a locked exchange).
func fullFence() { fenceWord.Swap(0) }
