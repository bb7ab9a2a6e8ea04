package engine

// On-demand connections: the handshake of a link that one rank dials when
// it first needs the peer, while the peer accepts whenever the request
// comes (package comm runs the dialing, the accept loop and the choice
// between two connections dialed at once).
//
// The dialer sends its hello with a join request (the world it belongs to
// and the rank it means to reach), one message as a hello is. The
// acceptor waits for it, checks the world and the rank, asks its caller
// whether to keep the connection (decide), and answers with its own
// hello, or with a reject that carries the reason, which ends the dialer's Establish with
// an error wrapping ErrRejected. Worlds are numbered (a shrink's epoch): a
// join from a later world is refused with RejectLater (the acceptor has
// not got there yet; dial again), one from an earlier world with
// RejectStale.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// ErrRejected: the peer refused a connection; the error says why
// (RejectReason).
var ErrRejected = errors.New("connection refused by the peer")

// Reasons for a reject.
const (
	RejectDuplicate uint32 = iota + 1 // the acceptor keeps the connection it dialed itself
	RejectLater                       // the acceptor is still in an earlier world: dial again
	RejectStale                       // the dialer's world is over
	RejectWrongRank                   // the dialer meant another rank, or gave a bad one
	RejectClosing                     // the acceptor is closing
)

// RejectError is the error of a refused connection.
type RejectError struct{ Reason uint32 }

func (e *RejectError) Error() string {
	why := map[uint32]string{RejectDuplicate: "it keeps its own connection", RejectLater: "it has not reached this world yet",
		RejectStale: "this world is over", RejectWrongRank: "wrong rank", RejectClosing: "it is closing"}[e.Reason]
	if why == "" {
		why = fmt.Sprintf("reason %d", e.Reason)
	}
	return fmt.Sprintf("%v: %s", ErrRejected, why)
}

func (e *RejectError) Unwrap() error { return ErrRejected }

func rejectErr(reason uint32) error { return &RejectError{Reason: reason} }

// RejectReason returns the reason of a refused connection, 0 if err is not
// one.
func RejectReason(err error) uint32 {
	var re *RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	return 0
}

// EstablishDial runs the dialer's side of the handshake on conn (made with
// dev.QPInit()) for e's rank, of world, which asks for peer. The link is
// meant for e (AddLink): until it is added, its completions wake e when
// it sleeps, since they use up the CQ arm e sleeps on.
func EstablishDial(ctx context.Context, conn rdma.Conn, dev *Device, e *Engine, peer int, world uint32, p LinkParams) (l *Link, err error) {
	rank := e.Rank
	if l, err = newLink(conn, dev, p, e); err != nil {
		return nil, err
	}
	defer l.disposeIf(&err)
	if l.slots > 1<<15-1 || l.slotSize > (1<<16-1)*64 {
		return nil, fmt.Errorf("collectives: staging of %d slots of %d bytes: at most 32767 slots of 4 MiB", l.slots, l.slotSize)
	}
	slots := uint16(l.slots)
	if l.mbConn != nil {
		slots |= joinMailbox
	}
	var m [ctrlSize]byte
	binary.LittleEndian.PutUint32(m[0:], ctrlJoinHello)
	binary.LittleEndian.PutUint32(m[4:], uint32(rank))
	binary.LittleEndian.PutUint64(m[8:], l.stage.Addr())
	binary.LittleEndian.PutUint32(m[16:], l.stage.RKey())
	binary.LittleEndian.PutUint16(m[20:], slots)
	binary.LittleEndian.PutUint16(m[22:], uint16(l.slotSize/64))
	binary.LittleEndian.PutUint32(m[24:], world)
	binary.LittleEndian.PutUint32(m[28:], uint32(peer))
	if err = l.conn.PostSend(wrid(l.id, kindCtrl, 0), m[:], nil, rdma.FlagInline); err != nil {
		// A refusal that came first says more than the closed connection.
		select {
		case <-l.ready:
			if RejectReason(l.setupErr) != 0 {
				err = l.setupErr
			}
		case <-ctx.Done():
		}
		return nil, err
	}
	if err = l.awaitHello(ctx); err != nil {
		return nil, err
	}
	if l.Peer != peer {
		return nil, fmt.Errorf("collectives: dialed rank %d, reached rank %d: %w", e.Name(peer), e.Name(l.Peer), ErrProtocol)
	}
	return l, nil
}

// EstablishAccept runs the acceptor's side of the handshake on conn (made
// with dev.QPInit()) for e's rank, of world, as EstablishDial does for the
// dialer. decide is called once with the dialer's rank, which is in
// [0, e.Size) and not e.Rank; it returns 0 to keep the connection or a
// reason to refuse it.
func EstablishAccept(ctx context.Context, conn rdma.Conn, dev *Device, e *Engine, world uint32, p LinkParams, decide func(peer int) uint32) (l *Link, err error) {
	rank, size := e.Rank, e.Size
	if l, err = newLink(conn, dev, p, e); err != nil {
		return nil, err
	}
	defer l.disposeIf(&err)
	select {
	case <-l.joined:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.joinErr != nil {
		return nil, l.joinErr
	}
	m := l.join[:]
	from := int(int32(binary.LittleEndian.Uint32(m[4:])))
	theirs := binary.LittleEndian.Uint32(m[24:])
	target := int(int32(binary.LittleEndian.Uint32(m[28:])))
	var reason uint32
	switch {
	case theirs > world:
		reason = RejectLater
	case theirs < world:
		reason = RejectStale
	case target != rank || from < 0 || from >= size || from == rank:
		reason = RejectWrongRank
	default:
		reason = decide(from)
	}
	if reason != 0 {
		l.reject(ctx, reason)
		return nil, fmt.Errorf("rank %d (world %d): %w", e.Name(from), theirs, rejectErr(reason))
	}
	if err = l.sendHello(rank); err != nil {
		return nil, err
	}
	// The join was the dialer's hello, packed.
	var h [ctrlSize]byte
	copy(h[:20], m[:20])
	slots := uint32(binary.LittleEndian.Uint16(m[20:]))
	if slots&joinMailbox != 0 {
		slots = slots&^joinMailbox | helloMailbox
	}
	binary.LittleEndian.PutUint32(h[20:], slots)
	binary.LittleEndian.PutUint32(h[24:], uint32(binary.LittleEndian.Uint16(m[22:]))*64)
	binary.LittleEndian.PutUint32(h[28:], hdrMagic)
	if err = l.takeHello(h[:]); err != nil {
		return nil, err
	}
	if l.rSlots < 1 || l.rSlotSize < hdrSize+64 {
		return nil, fmt.Errorf("collectives: bad hello from rank %d: %w", e.Name(l.Peer), ErrProtocol)
	}
	if l.hdrs, err = dev.Dev.Alloc(l.rSlots*l.hdrStride(), rdma.AccessLocalWrite); err != nil {
		return nil, err
	}
	return l, nil
}

// joinMailbox is helloMailbox in a join request's 16-bit slot count.
const joinMailbox = 1 << 15

// rejectGrace bounds the wait for a reject to leave before the caller
// closes the connection.
const rejectGrace = 200 * time.Millisecond

// reject tells the dialer why its connection is refused and waits
// (briefly) until the notice has gone out.
func (l *Link) reject(ctx context.Context, reason uint32) {
	l.sendMu.Lock()
	binary.LittleEndian.PutUint32(l.ctrl[0:], ctrlReject)
	binary.LittleEndian.PutUint32(l.ctrl[4:], reason)
	err := l.conn.PostSend(wrid(l.id, kindBye, 0), l.ctrl[:24], nil, rdma.FlagInline|rdma.FlagSignaled)
	l.sendMu.Unlock()
	if err != nil {
		return
	}
	t := time.NewTimer(rejectGrace)
	defer t.Stop()
	select {
	case <-l.byeSent:
	case <-l.sendOut:
	case <-ctx.Done():
	case <-t.C:
	}
}
