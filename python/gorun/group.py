"""Communicators of some of the job's ranks (gorun_comm_create_group, as
MPI_Comm_create_group): create_group(ranks) returns a Group whose methods
are the package's collectives over those ranks only.

A Group's method runs the package's function of that name with the
group's communicator as the calling thread's current one (_state.comm,
which _c() reads), so ranks, roots and sizes are the group's; other
threads keep theirs."""
import ctypes
import weakref
import zlib

from . import GorunError, _L, _c, _check, _refusing, _state, rank, size

_open = weakref.WeakSet()  # groups not yet freed; finalize() frees them
_made = {}  # (parent handle, ranks) -> how many groups of those ranks it made, for their tags


class Group:
    """A communicator of some ranks, from create_group. Its methods are
    the package's: rank, size, local_rank, local_size, barrier,
    allreduce_, allreduce, broadcast_, allgather, reduce_scatter,
    iallreduce_, ibroadcast_, ireduce_scatter, ibarrier, reduce, gather,
    scatter, alltoall, scan, exscan, send, recv, isend, irecv,
    broadcast_object, create_group, with ranks (roots, and the peers of
    send and recv) numbered in the group: its rank i is the rank ranks[i]
    of the communicator it was made from. local_rank and local_size count
    the group's members on this host, from the host identities they
    exchange when the group is made (as the job's are). free() it, or use it as a context manager;
    finalize() frees the groups left."""

    def __init__(self, handle, ranks):
        self._h = handle
        self.ranks = tuple(ranks)

    def _call(self, fn, *args, **kwargs):
        if self._h is None:
            raise GorunError(4, "gorun: the group was freed")
        prev = getattr(_state, "comm", None)
        _state.comm = self._h
        try:
            return fn(*args, **kwargs)
        finally:
            _state.comm = prev

    def free(self):
        """Free the group's communicator (not collective: the other
        members' later calls on the group fail)."""
        if self._h is not None:
            h, self._h = self._h, None
            _open.discard(self)
            _check(_L().gorun_finalize(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


def _method(name):
    def method(self, *args, **kwargs):
        import gorun
        return self._call(getattr(gorun, name), *args, **kwargs)
    method.__name__ = name
    method.__doc__ = "gorun.%s over the group's ranks." % name
    return method


for _name in ("rank", "size", "local_rank", "local_size", "barrier", "allreduce_", "allreduce", "broadcast_", "allgather", "reduce_scatter",
              "iallreduce_", "ibroadcast_", "ireduce_scatter", "ibarrier", "reduce", "gather", "scatter", "alltoall",
              "scan", "exscan", "send", "recv", "isend", "irecv", "broadcast_object", "create_group"):
    setattr(Group, _name, _method(_name))


def create_group(ranks, tag=None):
    """A Group of the listed ranks, in that order. Collective over those
    ranks only: each calls it with the same ranks, the other ranks do not
    call it. ranks out of range, repeated or without the caller raise
    ValueError, and fail the call on the other members naming this rank
    (the communicator it is made from is aborted, as by other refused
    calls; see the package's doc). Members must have no message
    between them in flight (gorun.h). tag, the same on every member, tells
    groups apart; by default it comes from the ranks and how many groups of
    those ranks this communicator has made."""
    parent, me, s = _c(), rank(), size()
    with _refusing("creategroup"):
        ranks = [int(r) for r in ranks]
        if not ranks or len(set(ranks)) != len(ranks) or any(not 0 <= r < s for r in ranks) or me not in ranks:
            raise ValueError("gorun: create_group needs distinct ranks in [0, %d) that include this rank (%d), not %s"
                             % (s, me, ranks))
    if tag is None:
        key = (parent, tuple(ranks))
        count = _made.get(key, 0)
        _made[key] = count + 1
        tag = zlib.crc32(repr(key[1:] + (count,)).encode()) & 0x3FFFFFFF
    out = ctypes.c_int64()
    _check(_L().gorun_comm_create_group(parent, (ctypes.c_int * len(ranks))(*ranks), len(ranks), int(tag),
                                        ctypes.byref(out)))
    g = Group(out.value, ranks)
    _open.add(g)
    return g


def _free_all():
    for g in list(_open):
        try:
            g.free()
        except GorunError:
            pass  # finalize goes on; the group was already failed
