"""gorun for Python: collectives on numpy arrays and PyTorch tensors.

    import gorun
    gorun.init()                      # joins the job gorun/srun/mpirun/torchrun started
    gorun.allreduce_(tensor, op="sum")
    gorun.broadcast_(tensor, root=0)
    g = gorun.create_group([0, 2])    # on ranks 0 and 2 only; g.allreduce_(t), ...

Start one process per rank with the launcher:

    gorun -np 2 /usr/bin/python3 train.py

Operations work in place on C-contiguous CPU tensors and arrays. The shared
library (libgorun.so, the C ABI in include/gorun.h) is found beside this
checkout and built with the go tool when it is missing or stale; set
GORUN_LIB to use another, built from the same gorun: one that lacks a
function of gorun.h (built before it was added) is refused, naming them.

Errors. An argument a rank can check alone (a root out of range, an op the
element type lacks, an unknown op, a tensor not on the CPU or not
contiguous, an in-place buffer that is read-only, a length size does not
divide, a send's or recv's peer out of range or tag outside int32) raises
ValueError or TypeError on that rank before any data moves, and fails the
call on the other ranks at once (gorun_refuse): they raise
GorunError naming this rank instead of waiting for it. An error from the
operation itself raises GorunError. Either way, as in the C ABI, the
communicator is aborted: every later call fails until finalize() and
init() (a Group's: free it, and make another). allgather and scatter are
the exception: they exchange their inputs' descriptions first, so inputs
that do not fit together raise on every rank alike and leave the
communicator usable.

Point to point (send, recv, isend, irecv: _p2p.py) follows gorun.h: a
pair's messages match in order, and an exchange's isends and irecvs must
all be started before waiting on one. Prefix reductions: scan, exscan.

Non-blocking ops (iallreduce_, ibroadcast_, ireduce_scatter, ibarrier,
isend, irecv) return a Handle: wait() or wait(timeout) for it, test() or
poll(handle) without blocking. A wait whose timeout passes raises
GorunError with status ERR_TIMEOUT and, since
gorun cannot cancel an operation in flight, aborts that operation's
communicator on every rank (Handle.wait).
"""
import atexit
import contextlib
import ctypes
import threading

from . import _lib

__all__ = [
    "GorunError", "ERR_TIMEOUT", "ERR_JOB_GONE", "ERR_NO_QUORUM", "init", "finalize", "is_initialized", "rank", "size", "local_rank", "local_size",
    "barrier", "allreduce_", "allreduce", "broadcast_", "allgather", "reduce_scatter",
    "iallreduce_", "ibroadcast_", "ireduce_scatter", "ibarrier", "Handle", "poll",
    "send", "recv", "isend", "irecv", "scan", "exscan", "broadcast_parameters", "DistributedOptimizer",
    "reduce", "gather", "scatter", "alltoall", "broadcast_object", "broadcast_optimizer_state", "join",
    "create_group", "Group",
]

_OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4, "average": 4, "mean": 4,
        "band": 5, "bor": 6, "bxor": 7, "land": 8, "lor": 9}


# GorunError.status of an operation that did not finish in time: within
# GORUN_TIMEOUT, or within the timeout of Handle.wait (GORUN_ERR_TIMEOUT).
ERR_TIMEOUT = 3

# init()'s status (GorunError.status) in a rank gorun restarted
# (--max-restarts) that found none of the job's other ranks left to admit
# it: they finished first. The job's work ended without this rank; a script
# whose work is then done exits 0 (GORUN_ERR_JOB_GONE in gorun.h).
ERR_JOB_GONE = 7

# shrink()'s or grow()'s status with GORUN_QUORUM=majority on a rank whose
# new world keeps no majority of the ranks of the last whole one: the job
# was cut in two and the other side goes on (GORUN_ERR_NO_QUORUM in gorun.h).
ERR_NO_QUORUM = 8


class GorunError(RuntimeError):
    """A failed gorun call: .status is the C status code."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


_state = threading.local()
_lib_handle = None
_comm = None
_lock = threading.Lock()


def _L():
    global _lib_handle
    if _lib_handle is None:
        _lib_handle = _lib.load()
    return _lib_handle


def _check(rc, last_error=None):
    """Raise GorunError for a non-zero status. last_error: the message
    read on the thread that made the call, when that was another thread
    (gorun_last_error is the calling thread's)."""
    if rc != 0:
        L = _L()
        if last_error is None:
            last_error = L.gorun_last_error()
        msg = last_error.decode(errors="replace") or L.gorun_strerror(rc).decode()
        if not msg.startswith("gorun: "):  # comm's own errors name it already
            msg = "gorun: " + msg
        raise GorunError(rc, msg)


def init():
    """Join the job described by the environment (idempotent)."""
    global _comm
    with _lock:
        if _comm is None:
            h = ctypes.c_int64()
            _check(_L().gorun_init(ctypes.byref(h)))
            _comm = h.value
            # A script that never calls finalize (one written for torchrun)
            # still leaves cleanly and writes its timeline (GORUN_TIMELINE).
            atexit.register(_finalize_at_exit)
    return _comm


# Run at exit before gorun finalizes the job's communicator, whatever the
# order in which atexit hooks were registered (the torch backend's
# _stop_at_exit, which stops its process groups on that communicator).
_before_finalize_at_exit = []


def _finalize_at_exit():
    for f in _before_finalize_at_exit:
        f()
    try:
        finalize()
    except GorunError:
        pass  # the job already failed; its error was reported


def is_initialized():
    return _comm is not None


def finalize():
    global _comm
    with _lock:
        if _comm is not None:
            from .group import _free_all
            _free_all()
            h, _comm = _comm, None
            rc = _L().gorun_finalize(h)
            del _orphans[:]  # the communicators are closed: no operation uses a buffer now
            _check(rc)


def _c():
    """The calling thread's communicator: the job's, or a Group's while
    one of its methods runs (group.py)."""
    h = getattr(_state, "comm", None)
    if h is not None:
        return h
    if _comm is None:
        raise GorunError(5, "gorun: call gorun.init() first")
    return _comm


def _query(fn):
    out = ctypes.c_int()
    _check(fn(_c(), ctypes.byref(out)))
    return out.value


def rank():
    return _query(_L().gorun_rank)


def size():
    return _query(_L().gorun_size)


def local_rank():
    return _query(_L().gorun_local_rank)


def local_size():
    return _query(_L().gorun_local_size)


def barrier():
    _check(_L().gorun_barrier(_c()))


# --- buffers -------------------------------------------------------------

# gorun_dtype by element type name (numpy's and torch's).
_DTYPE_CODES = {"int8": 0, "int16": 1, "int32": 2, "int64": 3, "uint8": 4, "uint16": 5, "uint32": 6,
                "uint64": 7, "float32": 8, "float64": 9, "float16": 10, "bfloat16": 11}


def _dtype_code(x):
    """gorun_dtype of a torch tensor or numpy array."""
    name = str(x.dtype).replace("torch.", "")
    if name not in _DTYPE_CODES:
        raise TypeError("gorun: unsupported element type %s" % x.dtype)
    return _DTYPE_CODES[name]


def _buffer(x, writes=True):
    """(pointer, element count, dtype code) of a C-contiguous CPU tensor or
    array; writes=False for one the call only reads (numpy's read-only
    arrays are accepted then)."""
    if hasattr(x, "data_ptr"):  # torch
        if x.device.type != "cpu":
            raise ValueError("gorun: tensor must be on the CPU, not %s" % x.device)
        if not x.is_contiguous():
            raise ValueError("gorun: tensor must be contiguous (call .contiguous())")
        return ctypes.c_void_p(x.data_ptr()), x.numel(), _dtype_code(x)
    if hasattr(x, "ctypes"):  # numpy
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError("gorun: array must be C-contiguous")
        if writes and not x.flags["WRITEABLE"]:
            raise ValueError("gorun: array must be writeable")
        return ctypes.c_void_p(x.ctypes.data), x.size, _dtype_code(x)
    raise TypeError("gorun: expected a torch.Tensor or numpy.ndarray, got %s" % type(x).__name__)


_FLOAT_CODES = (8, 9, 10, 11)


def _op(op, dt):
    """The gorun_op of op for dtype code dt: ValueError for an unknown op,
    TypeError for a bitwise or logical op on a float type."""
    try:
        code = _OPS[op.lower()]
    except (KeyError, AttributeError):
        raise ValueError("gorun: unknown op %r (sum, prod, min, max, avg, band, bor, bxor, land, lor)" % (op,))
    if code >= _OPS["band"] and dt in _FLOAT_CODES:
        raise TypeError("gorun: op %r is defined for integer types only" % (op,))
    return code


@contextlib.contextmanager
def _refusing(op):
    """Check op's arguments inside: a ValueError or TypeError raised there
    first fails op on every rank of the calling thread's communicator
    (gorun_refuse, which aborts it), so that the ranks whose arguments
    passed raise GorunError naming this rank rather than wait for it."""
    try:
        yield
    except (ValueError, TypeError) as e:
        h = getattr(_state, "comm", None) or _comm
        if h is not None:
            _L().gorun_refuse(h, op.encode(), str(e).encode(errors="replace"))
        raise


def _rank_arg(x, what):
    """x, a rank argument (what: "root", "destination", "source"), as an
    int; ValueError when it is no rank of the communicator."""
    r = int(x)
    s = size()
    if not 0 <= r < s:
        raise ValueError("gorun: %s %d out of range [0, %d)" % (what, r, s))
    return r


def _root(root):
    return _rank_arg(root, "root")


def _empty_like(x, n):
    if hasattr(x, "data_ptr"):
        import torch
        return torch.empty(n, dtype=x.dtype)
    import numpy
    return numpy.empty(n, dtype=x.dtype)


# --- blocking collectives -----------------------------------------------------

def allreduce_(x, op="sum"):
    """Reduce x across ranks in place; returns x. ValueError for an unknown
    op, TypeError for a bitwise or logical op on a float type."""
    with _refusing("allreduce"):
        p, n, dt = _buffer(x)
        code = _op(op, dt)
    _check(_L().gorun_allreduce(_c(), p, p, n, dt, code))
    return x


def allreduce(x, op="sum"):
    """A reduced copy of x."""
    y = x.clone() if hasattr(x, "clone") else x.copy()
    return allreduce_(y, op)


def broadcast_(x, root=0):
    """Copy root's x to every rank in place; returns x. ValueError for a
    root out of range."""
    with _refusing("broadcast"):
        p, n, dt = _buffer(x)
        r = _root(root)
    _check(_L().gorun_broadcast(_c(), p, n, dt, r))
    return x


def reduce_scatter(x, op="sum"):
    """Reduce x across ranks and return this rank's 1/size block.
    ValueError for a length size does not divide or an unknown op,
    TypeError for a bitwise or logical op on a float type."""
    p, q, n, dt, code, out = _reduce_scatter_args("reducescatter", x, op)
    _check(_L().gorun_reduce_scatter(_c(), p, q, n, dt, code))
    return out


def _reduce_scatter_args(name, x, op):
    """reduce_scatter's checks (refused as name): x's pointer, the block's
    pointer, its length, the dtype and op codes, and the block."""
    with _refusing(name):
        p, n, dt = _buffer(x, writes=False)
        code = _op(op, dt)
        s = size()
        if n % s:
            raise ValueError("gorun: reduce_scatter needs a length divisible by size (%d %% %d)" % (n, s))
    out = _empty_like(x, n // s)
    return p, _buffer(out)[0], n // s, dt, code, out


# --- non-blocking -------------------------------------------------------------

# The requests of Handles dropped before their operation ended, with the
# buffers it reads or writes: (request, buffers). gorun still uses those
# buffers, so they must outlive the Handle, as torch's Work keeps its
# tensors. Each new Handle releases those whose operation has ended
# (_release_orphans); finalize() releases the rest.
_orphans = []


def _release_orphans():
    """Release the dropped Handles' buffers whose operations have ended
    (gorun_test, which does not block). A failed one is released too: its
    error reached the communicator, which the next call reports."""
    if not _orphans:
        return
    L, done = _L(), ctypes.c_int()
    # One item at a time (list.pop and append are atomic): a Handle
    # dropped meanwhile, on any thread, appends without being lost.
    for _ in range(len(_orphans)):
        try:
            req, bufs = _orphans.pop(0)
        except IndexError:
            return
        done.value = 0
        L.gorun_test(req, ctypes.byref(done))
        if not done.value:
            _orphans.append((req, bufs))


class Handle:
    """A non-blocking operation; keeps its buffers alive until it ends,
    even if the Handle is dropped unwaited. buf is what wait() returns;
    keep, another buffer the operation reads (ireduce_scatter's input)."""

    def __init__(self, req, buf, comm, keep=None):
        _release_orphans()
        self._req, self._buf, self._comm, self._keep = req, buf, comm, keep
        self._failed = None  # the GorunError of a wait that timed out

    def __del__(self):
        # Dropped before its operation was seen to end: gorun may still
        # write buf (an irecv) or read it, so the buffers outlive the
        # Handle until the operation ends (_release_orphans).
        req = getattr(self, "_req", None)
        if req is not None and _orphans is not None:
            _orphans.append((req, (self._buf, self._keep)))

    def wait(self, timeout=None):
        """Wait for the operation and return its buffer. timeout: None
        (bounded by GORUN_TIMEOUT only), seconds, or a datetime.timedelta.
        Once timeout passes without the operation finishing, it raises
        GorunError (a RuntimeError, as torch's Work.wait raises) with
        status ERR_TIMEOUT. gorun cannot cancel an operation in flight, so
        such a wait first aborts the communicator the operation runs on
        (the job's, or a Group's; as torch's NCCL backend does): that
        operation, the ones started before it and every later one on that
        communicator fail, on this rank and on its peers, instead of
        hanging behind it. A Group is then spent (free it); the job's
        communicator needs finalize() and init(). Later wait() and test()
        calls on the handle raise the same error. ValueError for a
        negative timeout, before anything else."""
        limit = _seconds(timeout)
        if self._failed is not None:
            raise self._failed
        if self._req is None:
            return self._buf
        L = _L()
        if limit is None:
            req, self._req = self._req, None
            _check(L.gorun_wait(req))
            return self._buf
        if self.test():
            return self._buf
        # gorun_wait takes no bound: it runs on a thread of its own, which
        # this one waits for with the bound.
        req, self._req = self._req, None
        finished = threading.Event()
        result = []

        def run():
            rc = L.gorun_wait(req)
            result.append((rc, L.gorun_last_error() if rc else None))
            finished.set()

        t = threading.Thread(target=run, name="gorun-wait", daemon=True)
        t.start()
        if finished.wait(limit):
            t.join()
            _check(*result[0])
            return self._buf
        why = ("gorun: Handle.wait timed out after %gs; gorun cannot cancel an operation in flight, so it "
               "aborted the communicator: this operation and every later one on it fail" % limit)
        L.gorun_abort(self._comm, why.encode())
        t.join()  # the abort ends the operation: nothing writes the buffer after this
        self._failed = GorunError(ERR_TIMEOUT, why)
        raise self._failed

    def test(self):
        """True once the operation has finished (gorun_test, which does not
        block), False before; raises GorunError if it failed."""
        if self._failed is not None:
            raise self._failed
        if self._req is None:
            return True
        done = ctypes.c_int()
        rc = _L().gorun_test(self._req, ctypes.byref(done))
        if done.value:
            self._req = None
        _check(rc)
        return bool(done.value)


def poll(handle):
    """Horovod's hvd.poll: handle.test(), True once the non-blocking
    operation has finished, without blocking."""
    return handle.test()


def _seconds(timeout):
    """timeout in seconds (None, a number, or a datetime.timedelta)."""
    if timeout is None:
        return None
    s = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    if not s >= 0:
        raise ValueError("gorun: timeout must be at least 0 seconds, not %r" % (timeout,))
    return s


def iallreduce_(x, op="sum"):
    """Start reducing x in place; wait() on the Handle returns x. Arguments
    are checked as allreduce_'s."""
    with _refusing("iallreduce"):
        p, n, dt = _buffer(x)
        code = _op(op, dt)
    req = ctypes.c_int64()
    _check(_L().gorun_iallreduce(_c(), p, p, n, dt, code, ctypes.byref(req)))
    return Handle(req.value, x, _c())


def ibroadcast_(x, root=0):
    """Start broadcast_; wait() on the Handle returns x. ValueError for a
    root out of range."""
    with _refusing("ibroadcast"):
        p, n, dt = _buffer(x)
        r = _root(root)
    req = ctypes.c_int64()
    _check(_L().gorun_ibroadcast(_c(), p, n, dt, r, ctypes.byref(req)))
    return Handle(req.value, x, _c())


def ireduce_scatter(x, op="sum"):
    """Start reduce_scatter; wait() on the Handle returns this rank's
    1/size block. Arguments are checked as reduce_scatter's; x is read
    until the operation ends (the Handle keeps it alive)."""
    p, q, n, dt, code, out = _reduce_scatter_args("ireducescatter", x, op)
    req = ctypes.c_int64()
    _check(_L().gorun_ireduce_scatter(_c(), p, q, n, dt, code, ctypes.byref(req)))
    return Handle(req.value, out, _c(), keep=x)


def ibarrier():
    """Start a barrier; wait() on the Handle returns None once every rank
    has entered it (its ibarrier or barrier), and test() says whether they
    have without blocking, so that a rank can compute meanwhile."""
    req = ctypes.c_int64()
    _check(_L().gorun_ibarrier(_c(), ctypes.byref(req)))
    return Handle(req.value, None, _c())


from ._allgather import allgather  # noqa: E402
from ._p2p import send, recv, isend, irecv  # noqa: E402
from ._scan import scan, exscan  # noqa: E402
from .rooted import reduce, gather, scatter, alltoall, broadcast_object  # noqa: E402
from .group import Group, create_group  # noqa: E402
from .torch_support import broadcast_parameters, broadcast_optimizer_state, DistributedOptimizer, join  # noqa: E402
