package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The handshake runs before any frame: both ends send a hello (magic,
// protocol version, whether they hold a token and whether they checksum
// frames, a fresh nonce). Both must agree on checksums (Config.Checksum). When both
// hold a token each proves it with HMAC-SHA256(token, role‖own nonce‖peer
// nonce) — the token never crosses the wire and a proof cannot be replayed
// or reflected — then each sends a one-byte verdict on the other's proof.
// Only after that does the connection read frames, so a peer without the
// token never reaches registered memory.
const (
	protoVersion = 2 // 2: every frame header has its CRC
	nonceLen     = 32
	helloLen     = 8 + 2 + 2 + nonceLen
	helloAuth    = 1 << 0
	helloCRC     = 1 << 1 // Config.Checksum: frames carry CRC32Cs

	// handshakeTimeout bounds a handshake whose ctx has no deadline, so a
	// stray client cannot hold Accept forever.
	handshakeTimeout = 10 * time.Second
)

var helloMagic = [8]byte{'g', 'o', 'r', 'u', 'n', 'T', 'C', 'P'}

type role byte

const (
	roleDial   role = 'D'
	roleAccept role = 'A'
)

// handshake authenticates nc under ctx; the error is an rdma sentinel
// (ErrAuth, ErrNotSupported) or the I/O error, not yet wrapped. A refusal
// of the peer by this end is a *refusal.
func handshake(ctx context.Context, nc net.Conn, token []byte, crc bool, me role) error {
	// ctx's own deadline is left to AfterFunc, so that a cancelled
	// handshake reports ctx.Err() rather than a socket timeout.
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(longAgo) })
	err := exchange(nc, token, crc, me)
	if !stop() {
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	return nc.SetDeadline(time.Time{})
}

// refusal is a handshake this end refused: the peer presented a wrong
// token, none, or no gorun hello at all. Devices count them.
type refusal struct{ error }

func (r *refusal) Unwrap() error { return r.error }

func refuse(format string, args ...any) error {
	return &refusal{fmt.Errorf("%w: "+format, append([]any{rdma.ErrAuth}, args...)...)}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func exchange(rw io.ReadWriter, token []byte, crc bool, me role) error {
	var mine, theirs [helloLen]byte
	copy(mine[:], helloMagic[:])
	binary.LittleEndian.PutUint16(mine[8:], protoVersion)
	var flags uint16
	if len(token) > 0 {
		flags |= helloAuth
	}
	if crc {
		flags |= helloCRC
	}
	binary.LittleEndian.PutUint16(mine[10:], flags)
	if _, err := rand.Read(mine[12:]); err != nil {
		return err
	}
	if _, err := rw.Write(mine[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(rw, theirs[:]); err != nil {
		return err
	}
	if [8]byte(theirs[:8]) != helloMagic {
		return refuse("not a gorun tcp peer")
	}
	if v := binary.LittleEndian.Uint16(theirs[8:]); v != protoVersion {
		return fmt.Errorf("%w: peer speaks protocol version %d, want %d", rdma.ErrNotSupported, v, protoVersion)
	}
	peerFlags := binary.LittleEndian.Uint16(theirs[10:])
	if peerCRC := peerFlags&helloCRC != 0; peerCRC != crc {
		return fmt.Errorf("%w: frame checksums (Config.Checksum, GORUN_CHECKSUM) are %s here and %s on the peer; both ends must agree",
			rdma.ErrNotSupported, onOff(crc), onOff(peerCRC))
	}
	peerAuth := peerFlags&helloAuth != 0
	switch {
	case len(token) == 0 && !peerAuth:
		return nil
	case len(token) == 0:
		return fmt.Errorf("%w: peer requires a token and none is configured", rdma.ErrAuth)
	case !peerAuth:
		return refuse("peer has no token")
	}
	myNonce, peerNonce := mine[12:], theirs[12:]
	if hmac.Equal(myNonce, peerNonce) {
		return refuse("peer echoed our nonce")
	}
	peer := roleAccept
	if me == roleAccept {
		peer = roleDial
	}
	proof := prove(token, me, myNonce, peerNonce)
	if _, err := rw.Write(proof); err != nil {
		return err
	}
	var got [sha256.Size]byte
	if _, err := io.ReadFull(rw, got[:]); err != nil {
		return err
	}
	ok := hmac.Equal(got[:], prove(token, peer, peerNonce, myNonce))
	verdict := [1]byte{0}
	if ok {
		verdict[0] = 1
	}
	if _, err := rw.Write(verdict[:]); err != nil {
		return err
	}
	if !ok {
		return refuse("peer's proof does not match our token")
	}
	if _, err := io.ReadFull(rw, verdict[:]); err != nil {
		return err
	}
	if verdict[0] != 1 {
		return fmt.Errorf("%w: peer rejected our token", rdma.ErrAuth)
	}
	return nil
}

func prove(token []byte, r role, own, peer []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte{byte(r)})
	m.Write(own)
	m.Write(peer)
	return m.Sum(nil)
}
