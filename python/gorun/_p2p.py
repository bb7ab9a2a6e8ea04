"""Point-to-point messages for gorun's Python package: send, recv, isend
and irecv, over gorun_send, gorun_recv, gorun_isend and gorun_irecv.

Matching. Messages between two ranks match in order, collectives
included (as in NCCL): a receive takes the next message its source sends
this rank, and must name that message's tag, element count and element
type, else it fails (GorunError, status 2) and the communicator is
aborted. Tags are any int in the int32 range, negative ones included (as
in comm and the C ABI).

Non-blocking messages. A started isend or irecv does not run at once: the
ones started run together, as one group, when a wait or test needs one of
them, a blocking send or recv joins them, or another call starts on the
communicator. So two ranks may each isend the other a message of any size
before their irecv, but every message of an exchange must be started
before waiting on one of them (gorun.h, above gorun_ibarrier). A message
to this rank itself completes with the irecv from itself started in the
same group; without one it could never complete, and the C ABI refuses it
(GorunError, status 1, aborting the communicator on every rank).

Peers are ranks of the calling communicator: a Group's methods take ranks
numbered in the group.

Bad arguments. A peer out of range, a tag outside the int32 range, or a
buffer the package refuses raise ValueError or TypeError on this rank,
and fail the call on every rank of the communicator (gorun_refuse),
aborting it, rather than on this rank alone: that is what the C ABI does
for the same peer (comm refuses a destination or source out of range, or
a tag outside int32, with ErrInvalid and withdraws this rank from the
communicator on every rank), and what the package does for the other
calls' arguments. A peer waits for the message this rank will not send,
and every rank orders its calls on the communicator with this one's, so a
refusal that stayed local would leave them waiting until GORUN_TIMEOUT.
"""
import ctypes

from . import Handle, _L, _buffer, _c, _check, _rank_arg, _refusing

_TAG_MIN, _TAG_MAX = -(1 << 31), (1 << 31) - 1  # a tag travels in 32 bits


def _args(name, x, peer, what, tag, writes):
    """The pointer, count and dtype of x, the peer and the tag, checked
    (refused as name)."""
    with _refusing(name):
        p, n, dt = _buffer(x, writes=writes)
        peer = _rank_arg(peer, what)
        tag = int(tag)
        if not _TAG_MIN <= tag <= _TAG_MAX:
            raise ValueError("gorun: tag %d outside the int32 range [%d, %d]" % (tag, _TAG_MIN, _TAG_MAX))
    return p, n, dt, peer, tag


def send(x, dst, tag=0):
    """Send x to rank dst with tag. Returns once x may be reused (the
    message has left; dst may not have received it yet). ValueError for a
    dst out of range or a tag outside int32 (see the module's doc)."""
    p, n, dt, dst, tag = _args("send", x, dst, "destination", tag, False)
    _check(_L().gorun_send(_c(), p, n, dt, dst, tag))


def recv(x, src, tag=0):
    """Receive into x the next message from rank src, which must carry tag
    and x's element count and type; returns x. ValueError for a src out of
    range, a tag outside int32 or a read-only array."""
    p, n, dt, src, tag = _args("recv", x, src, "source", tag, True)
    _check(_L().gorun_recv(_c(), p, n, dt, src, tag))
    return x


def isend(x, dst, tag=0):
    """Start send; wait() on the Handle returns x once it may be reused.
    Arguments are checked as send's. Do not change x before then."""
    p, n, dt, dst, tag = _args("isend", x, dst, "destination", tag, False)
    req = ctypes.c_int64()
    _check(_L().gorun_isend(_c(), p, n, dt, dst, tag, ctypes.byref(req)))
    return Handle(req.value, x, _c())


def irecv(x, src, tag=0):
    """Start recv into x; wait() on the Handle returns x, filled.
    Arguments are checked as recv's."""
    p, n, dt, src, tag = _args("irecv", x, src, "source", tag, True)
    req = ctypes.c_int64()
    _check(_L().gorun_irecv(_c(), p, n, dt, src, tag, ctypes.byref(req)))
    return Handle(req.value, x, _c())
