package rdma

// Mailbox is implemented by a Conn whose two processes both map a little
// memory of the connection: each side writes small messages into the
// other's area with plain stores and polls its own, as Open MPI's shared
// memory transport (vader) does with its "fast boxes". It is not part of
// librdmacm; it lets a caller that owns both ends' protocol (the
// collectives engine) skip the queues for messages of a few bytes, where
// a send's post, delivery and completion cost more than the copy. shm
// implements it; a Conn wrapped by a decorator (faulty) does not, and its
// messages keep to the queues.
//
// What a Mailbox promises:
//   - In and Out are zeroed when the connection is made, are MailboxBytes
//     long, 64-byte aligned, and stay mapped until Close: In is written
//     by the peer alone (its Out), Out read by the peer alone (its In),
//     apart from what the caller's own protocol says.
//   - Stores into Out become visible to the peer in the order this
//     process made them (x86's order; off x86 the caller publishes with
//     release stores and reads with acquire loads, sync/atomic's).
//   - Nothing else: no completion, no wake-up. A reader that wants to
//     sleep tells the writer so in the memory itself and is woken by a
//     message through the queues (see SleepFence).
type Mailbox interface {
	Conn
	// Mailbox returns the area the peer writes for this side (in) and the
	// one this side writes for the peer (out), or nothing where the
	// provider was told not to offer them.
	Mailbox() (in, out []byte)
	// SleepFence is the full barrier a reader runs between raising its
	// "about to sleep" flag in In and its last look at In before it
	// sleeps. It reports whether that barrier also reaches the writer's
	// CPU (membarrier, as shm's doorbells use): a writer may then store a
	// message and load the flag with no barrier between them. Otherwise
	// (false) the writer must put a full barrier between the two.
	SleepFence() bool
	// MailboxFenced reports, without a barrier, what SleepFence would:
	// whether the writer's side of the flag protocol may be plain.
	MailboxFenced() bool
}

// MailboxBytes is the length of a Mailbox's In and Out.
const MailboxBytes = 64 << 10
