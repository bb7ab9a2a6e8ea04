"""Prefix reductions for gorun's Python package: scan and exscan, over
gorun_scan and gorun_exscan (MPI_Scan and MPI_Exscan). They take a
C-contiguous CPU tensor or numpy array (read-only arrays too) and return a
new one of its shape and type; arguments are checked as allreduce_'s."""
from . import _L, _c, _check, _buffer, _empty_like, _op, _refusing, rank


def _prefix(name, fn, x, op):
    with _refusing(name):
        p, n, dt = _buffer(x, writes=False)
        code = _op(op, dt)
    out = _empty_like(x, n)
    _check(fn(_c(), p, _buffer(out)[0], n, dt, code))
    return out.reshape(tuple(x.shape))


def scan(x, op="sum"):
    """On rank r, x of ranks 0 … r reduced with op. "avg" divides by the
    ranks reduced, r + 1. ValueError for an unknown op, TypeError for a
    bitwise or logical op on a float type."""
    return _prefix("scan", _L().gorun_scan, x, op)


def exscan(x, op="sum"):
    """On rank r > 0, x of ranks 0 … r−1 reduced with op ("avg" divides by
    r); None on rank 0, where gorun_exscan leaves its output untouched
    (rank 0 reduces no rank's x). Rank 0's x still goes to the others.
    Arguments are checked as scan's."""
    out = _prefix("exscan", _L().gorun_exscan, x, op)
    return None if rank() == 0 else out
