"""Elastic training, as Horovod's hvd.elastic: survive a rank's death and
admit restarted ranks.

    import gorun
    from gorun import elastic

    gorun.init()
    state = elastic.State(model=model, optimizer=opt, epoch=0, batch=0)

    @elastic.run
    def train(state):
        while state.epoch < epochs:
            ...                      # a step: gorun collectives
            state.batch += 1
            state.commit()           # a consistent point: snapshot, admit joiners

    train(state)

Run it under `gorun --elastic --max-restarts N`. When a rank dies, the
collective in flight raises GorunError on the survivors; run() rolls the
state back to the last commit(), shrinks the communicator to the survivors
(gorun_shrink), makes every rank take the state of one of them (sync) and
calls train again. gorun restarts the dead rank; its gorun.init() joins the
running job and returns when the others admit it, which they do at their
next commit() (they agree on whether anyone waits with one 8-byte
allreduce, then gorun_grow): the communicator is full size again, with the
original ranks, and the newcomer receives the state. If the others
finished before it was back, its gorun.init() raises GorunError with status
gorun.ERR_JOB_GONE about 10 s after it finds no rank left: the work is
done without it, so such a script exits 0 there. With GORUN_QUORUM=majority,
the shrink of a rank on the smaller side of a job cut in two raises
GorunError with status gorun.ERR_NO_QUORUM: the other side goes on, and
the script exits so that gorun restarts it into that side.

State holds named values: torch modules and optimizers (anything with
state_dict/load_state_dict), numpy arrays and torch tensors (restored in
place), and any picklable value (ints, lists...). Read and write them as
attributes.
"""
import copy
import ctypes
import os

import gorun as _g
from . import GorunError, _L, _check, rank, size

__all__ = ["State", "run", "shrink", "grow", "joiners", "RECOVERABLE"]

# Status codes after which run() recovers: a peer failed (GORUN_ERR_PEER)
# or an operation timed out (GORUN_ERR_TIMEOUT).
RECOVERABLE = (2, 3)


def _remake(fn):
    new = ctypes.c_int64()
    with _g._lock:
        h = _g._c()
        rc = fn(h, ctypes.byref(new))
        # The old handle is freed either way (gorun.h).
        _g._comm = new.value if rc == 0 else None
    _check(rc)


def shrink():
    """Replace the communicator by one of the surviving ranks (collective over them)."""
    _remake(_L().gorun_shrink)


def grow():
    """Admit the ranks waiting to join (collective; see joiners)."""
    _remake(_L().gorun_grow)


def joiners():
    """Ranks waiting to join, in this rank's view (agree before grow())."""
    out = ctypes.c_int()
    _check(_L().gorun_joiners(_g._c(), ctypes.byref(out)))
    return out.value


def _agree(value, op):
    import numpy
    a = numpy.array([value], dtype=numpy.int64)
    _g.allreduce_(a, op)
    return int(a[0])


def _stateful(v):
    return hasattr(v, "state_dict") and hasattr(v, "load_state_dict")


class State:
    """Values kept consistent across ranks: see the module's doc."""

    def __init__(self, **values):
        object.__setattr__(self, "_names", list(values))
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_saved", None)
        object.__setattr__(self, "_callbacks", [])
        # A restarted rank (gorun --max-restarts) has nothing worth keeping.
        object.__setattr__(self, "_fresh", bool(os.environ.get("GORUN_RESTART")))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name)

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError("gorun.elastic.State has no value %r (name it in State(...))" % name)
        self._values[name] = value

    def register_reset_callbacks(self, callbacks):
        """Functions to call after the world changed (a shrink or a grow),
        before the state is synced: rebuild samplers, rescale the learning rate."""
        self._callbacks.extend(callbacks)

    def _snapshot(self):
        snap = {}
        for k, v in self._values.items():
            if _stateful(v):
                snap[k] = copy.deepcopy(v.state_dict())
            elif hasattr(v, "clone"):  # torch tensor
                snap[k] = v.detach().clone()
            else:
                snap[k] = copy.deepcopy(v)
        return snap

    def _load(self, snap):
        for k, s in snap.items():
            v = self._values[k]
            if _stateful(v):
                v.load_state_dict(s)
            elif hasattr(v, "copy_") and hasattr(s, "shape") and tuple(v.shape) == tuple(s.shape):
                with _no_grad():
                    v.copy_(s)
            elif hasattr(v, "shape") and hasattr(v, "__setitem__") and getattr(s, "shape", None) == v.shape:
                v[...] = s  # numpy: in place, so references stay valid
            else:
                self._values[k] = copy.deepcopy(s)

    def commit(self):
        """Mark a consistent point: a failure rolls back to here. Then admit
        the ranks waiting to join, if any (collective: every rank calls
        commit at the same points)."""
        object.__setattr__(self, "_saved", self._snapshot())
        self.check_joiners()

    def check_joiners(self):
        """Grow if a rank waits to join (agreed by all), then sync."""
        if _agree(joiners(), "max") > 0:
            grow()
            self._reset()

    def restore(self):
        """Roll back to the last commit (or sync)."""
        if self._saved is not None:
            self._load(self._saved)

    def sync(self):
        """Make every rank's values those of the lowest rank that has state
        (one that was not just restarted): collective."""
        me, n = rank(), size()
        root = _agree(n + me if self._fresh else me, "min") % n
        from .rooted import broadcast_object
        snap = broadcast_object(self._snapshot() if me == root else None, root)
        if me != root:
            self._load(snap)
        object.__setattr__(self, "_fresh", False)
        object.__setattr__(self, "_saved", self._snapshot())

    def _reset(self):
        for cb in self._callbacks:
            cb()
        self.sync()


class _no_grad:
    def __enter__(self):
        try:
            import torch
            self._g = torch.no_grad()
            self._g.__enter__()
        except ImportError:
            self._g = None

    def __exit__(self, *exc):
        if self._g is not None:
            self._g.__exit__(*exc)


def run(func):
    """Decorate train(state, ...): it is called after a sync, and called
    again after every recovery (roll back, shrink, sync) from a failed
    collective whose status is in RECOVERABLE. Other errors propagate."""
    def wrapper(state, *args, **kwargs):
        state.sync()
        while True:
            try:
                return func(state, *args, **kwargs)
            except GorunError as e:
                if e.status not in RECOVERABLE:
                    raise
                state.restore()
                shrink()
                state._reset()
    wrapper.__name__ = getattr(func, "__name__", "train")
    wrapper.__doc__ = func.__doc__
    return wrapper
