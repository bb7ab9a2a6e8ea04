//go:build linux

package shm

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// The handshake, symmetric but for the role labels:
//
//	hello  magic, version, flags (has token), 32-byte nonce
//	       (before it: the peer's uid, SO_PEERCRED, must be ours)
//	auth   HMAC-SHA256(token, role | peer nonce | own nonce), if a token is set
//	setup  the segment's address in the sender (for the CMA probe), with the
//	       segment memfd and the arena memfd attached (SCM_RIGHTS)
//	ready  8 bytes, once the peer's memory is mapped
const (
	helloLen  = 48
	setupLen  = 16
	helloAuth = 1
)

var errProtocol = errors.New("shm handshake: protocol error")

func (d *Device) handshake(ctx context.Context, uc *net.UnixConn, dialer bool) (c *conn, err error) {
	if dl, ok := ctx.Deadline(); ok {
		uc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer func() {
		if err != nil {
			uc.Close()
			if errors.Is(err, rdma.ErrAuth) {
				d.counts.auth.Add(1)
			}
		}
	}()

	cred, err := peerCred(uc)
	if err != nil {
		return nil, err
	}
	// Always, token or not: an abstract socket has no permissions to
	// keep other users out.
	if int(cred.Uid) != os.Getuid() {
		return nil, fmt.Errorf("pid %d runs as uid %d, not %d: %w", cred.Pid, cred.Uid, os.Getuid(), rdma.ErrAuth)
	}
	var nonce [32]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	var hello [helloLen]byte
	binary.LittleEndian.PutUint64(hello[0:], segMagic)
	binary.LittleEndian.PutUint32(hello[8:], segVersion)
	if len(d.cfg.Token) > 0 {
		binary.LittleEndian.PutUint32(hello[12:], helloAuth)
	}
	copy(hello[16:], nonce[:])
	if _, err := uc.Write(hello[:]); err != nil {
		return nil, err
	}
	var peerHello [helloLen]byte
	if _, err := io.ReadFull(uc, peerHello[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(peerHello[0:]) != segMagic || binary.LittleEndian.Uint32(peerHello[8:]) != segVersion {
		return nil, errProtocol
	}
	if peerAuth := binary.LittleEndian.Uint32(peerHello[12:]) == helloAuth; peerAuth != (len(d.cfg.Token) > 0) {
		return nil, fmt.Errorf("pid %d: one side has a token and the other none: %w", cred.Pid, rdma.ErrAuth)
	}
	if len(d.cfg.Token) > 0 {
		if err := d.authenticate(uc, dialer, nonce[:], peerHello[16:48], cred); err != nil {
			return nil, err
		}
	}

	c, err = newConn(d, uc, int(cred.Pid))
	if err != nil {
		return nil, err
	}
	// Not c: a "return nil, err" below has set it to nil when this runs.
	made := c
	defer func() {
		if err != nil {
			made.abandon()
			c = nil
		}
	}()
	segFd, err := c.takeSegFd()
	if err != nil {
		return nil, err
	}
	var setup [setupLen]byte
	binary.LittleEndian.PutUint64(setup[0:], segMagic)
	binary.LittleEndian.PutUint64(setup[8:], uint64(uintptr(unsafe.Pointer(&c.local.mem[0]))))
	// The segment, the arena and this side's eventfd (bell.go).
	_, _, err = uc.WriteMsgUnix(setup[:], unix.UnixRights(segFd, d.arena.fd, c.bell.fd), nil)
	unix.Close(segFd)
	if err != nil {
		return nil, err
	}
	var peerSetup [setupLen]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(peerSetup[:], oob)
	if err != nil {
		return nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	closeFds := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if ferr != nil || len(fds) != 3 {
		closeFds()
		return nil, errProtocol
	}
	if n < setupLen {
		if _, err := io.ReadFull(uc, peerSetup[n:]); err != nil {
			closeFds()
			return nil, err
		}
	}
	if binary.LittleEndian.Uint64(peerSetup[0:]) != segMagic || !isEventfd(fds[2]) {
		closeFds()
		return nil, errProtocol
	}
	unix.CloseOnExec(fds[2]) // kept open, unlike the other two
	c.peerBell = peerBellFd(fds[2])
	c.local.other = c.peerBell
	if c.peer, err = mapSegment(fds[0]); err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	c.peer.owner, c.peer.other = c.peerBell, c.bell
	c.plainRing = plainRing(c.local, c.peer)
	if c.arena, err = mapPeerArena(fds[1]); err != nil {
		return nil, err
	}
	c.peerArena = c.arena.mem
	c.cma = d.cma && probeCMA(c.peerPid, binary.LittleEndian.Uint64(peerSetup[8:]))
	if d.cma && !c.cma {
		d.cmaWarn.Do(func() {
			log.Printf("gorun shm: cross-memory attach to pid %d is not permitted (Yama ptrace_scope? seccomp?): "+
				"writes and reads of registered Go memory go through the peer, slower; Alloc'd memory is not affected", c.peerPid)
		})
	}
	if fd, err := unix.PidfdOpen(c.peerPid, unix.PIDFD_NONBLOCK); err == nil {
		unix.CloseOnExec(fd)
		c.pidfd = fd
	}

	var ready [8]byte
	binary.LittleEndian.PutUint64(ready[:], segMagic)
	if _, err := uc.Write(ready[:]); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(uc, ready[:]); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint64(ready[:]) != segMagic {
		return nil, errProtocol
	}
	uc.SetDeadline(time.Time{})
	if !stop() {
		return nil, ctx.Err()
	}
	c.start()
	return c, nil
}

func (d *Device) authenticate(uc *net.UnixConn, dialer bool, nonce, peerNonce []byte, cred *unix.Ucred) error {
	mac := func(role string, a, b []byte) []byte {
		h := hmac.New(sha256.New, d.cfg.Token)
		h.Write([]byte("gorun-shm/" + role))
		h.Write(a)
		h.Write(b)
		return h.Sum(nil)
	}
	own, peer := "listen", "dial"
	if dialer {
		own, peer = peer, own
	}
	if _, err := uc.Write(mac(own, peerNonce, nonce)); err != nil {
		return err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(uc, got); err != nil {
		return err
	}
	if !hmac.Equal(got, mac(peer, nonce, peerNonce)) {
		return fmt.Errorf("pid %d: bad token: %w", cred.Pid, rdma.ErrAuth)
	}
	return nil
}

func peerCred(uc *net.UnixConn) (*unix.Ucred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, os.NewSyscallError("getsockopt SO_PEERCRED", cerr)
	}
	return cred, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// isEventfd reports whether fd is an eventfd, as a peer's third
// descriptor must be: the doorbells write 8 bytes to it. Without /proc it
// cannot tell, and trusts the authenticated peer.
func isEventfd(fd int) bool {
	l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err != nil || l == "anon_inode:[eventfd]"
}

// probeCMA reads the peer's segment magic through process_vm_readv: it
// fails when ptrace access to the peer is denied (Yama ptrace_scope,
// another uid, a seccomp filter).
func probeCMA(pid int, addr uint64) bool {
	var got uint64
	local := []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&got)), Len: 8}}
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: 8}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return err == nil && n == 8 && got == segMagic
}
