"""Rooted collectives and all-to-all for gorun's Python package: reduce,
gather, scatter, alltoall (with Horovod's uneven splits) and
broadcast_object. Like the rest of the package they take C-contiguous CPU
tensors or numpy arrays and return new ones, and accept read-only arrays
as the input they only read. A root out of range or an op the element type
lacks raises ValueError or TypeError, and fails the call on the other
ranks naming this one (see the package's doc)."""
import ctypes
import io
import pickle

from . import _L, _c, _check, _buffer, _empty_like, _op, _refusing, _root, rank, size


def _like(x, n, shape=None):
    out = _empty_like(x, n)
    return out.reshape(shape) if shape is not None else out


def _i64(values):
    import numpy
    return numpy.ascontiguousarray(numpy.asarray(values, dtype=numpy.int64))


def reduce(x, op="sum", root=0):
    """x reduced across ranks: a new tensor/array on root, None elsewhere."""
    with _refusing("reduce"):
        p, n, dt = _buffer(x, writes=False)
        code, root = _op(op, dt), _root(root)
    out = _like(x, n, tuple(x.shape)) if rank() == root else None
    q = _buffer(out)[0] if out is not None else None
    _check(_L().gorun_reduce(_c(), p, q, n, dt, code, root))
    return out


def gather(x, root=0):
    """Every rank's x (the same shape everywhere) stacked in rank order on
    root (shape (size, *x.shape)); None elsewhere."""
    with _refusing("gather"):
        p, n, dt = _buffer(x, writes=False)
        root = _root(root)
    out = _like(x, n * size(), (size(),) + tuple(x.shape)) if rank() == root else None
    q = _buffer(out)[0] if out is not None else None
    _check(_L().gorun_gather(_c(), p, q, n, dt, root))
    return out


def scatter(x, root=0):
    """Block r of root's x (split along the first dimension, which size
    divides) goes to rank r. Other ranks pass any tensor/array of the same
    type and dtype (its values are not read): the shape comes from root.
    An x root cannot split (or send) raises ValueError or TypeError on
    every rank, and the communicator stays usable; a root out of range
    fails the call on every rank, as the package's other checks do."""
    with _refusing("scatter"):
        s, r, root = size(), rank(), _root(root)
    shape = _i64([0] * 9)
    refused = None
    if r == root:
        try:
            _buffer(x, writes=False)
            if len(x.shape) == 0 or x.shape[0] % s or len(x.shape) > 8:
                raise ValueError("gorun: scatter needs 1 to 8 dimensions and a first dimension divisible by %d" % s)
            shape[0] = len(x.shape)
            shape[1:1 + len(x.shape)] = x.shape
        except (ValueError, TypeError) as e:
            refused, shape[0] = e, -1  # the other ranks, waiting for the shape, raise too
    sp, _, sdt = _buffer(shape)
    _check(_L().gorun_broadcast(_c(), sp, 9, sdt, root))
    if shape[0] < 0:
        raise refused or ValueError("gorun: scatter: root %d refused its input" % root)
    dims = [int(d) for d in shape[1:1 + int(shape[0])]]
    dims[0] //= s
    n = 1
    for d in dims:
        n *= d
    out = _like(x, n, tuple(dims))
    q, _, dt = _buffer(out)
    p = _buffer(x, writes=False)[0] if r == root else None
    _check(_L().gorun_scatter(_c(), p, q, n, dt, root))
    return out


def alltoall(x, splits=None):
    """Horovod's alltoall: rows splits[b] of x (along the first dimension,
    in order) go to rank b; returns (received, received_splits), the rows
    from every rank concatenated in rank order. splits=None splits evenly."""
    with _refusing("alltoall"):
        p, _, dt = _buffer(x, writes=False)
        s = size()
        rows = x.shape[0] if len(x.shape) else 1
        if splits is None:
            if rows % s:
                raise ValueError("gorun: alltoall without splits needs a first dimension divisible by %d" % s)
            splits = [rows // s] * s
        splits = [int(v) for v in splits]
        if len(splits) != s or sum(splits) != rows or min(splits) < 0:
            raise ValueError("gorun: alltoall splits %s must be %d non-negative row counts summing to %d"
                             % (splits, s, rows))
    sent = _i64(splits)
    got = _i64([0] * s)
    sp, _, sdt = _buffer(sent)
    _check(_L().gorun_alltoall(_c(), sp, _buffer(got)[0], 1, sdt))
    row = 1
    for d in x.shape[1:]:
        row *= int(d)
    rsplits = [int(v) for v in got]
    out = _like(x, sum(rsplits) * row, (sum(rsplits),) + tuple(x.shape[1:]))
    sc = (ctypes.c_size_t * s)(*[v * row for v in splits])
    rc = (ctypes.c_size_t * s)(*[v * row for v in rsplits])
    _check(_L().gorun_alltoallv(_c(), p, sc, None, _buffer(out)[0], rc, None, dt))
    return out, rsplits


def broadcast_object(obj, root=0):
    """root's picklable obj on every rank (torch tensors inside included)."""
    import numpy
    with _refusing("broadcast"):
        root = _root(root)
    if rank() == root:
        f = io.BytesIO()
        try:
            import torch
            torch.save(obj, f)
        except ImportError:
            pickle.dump(obj, f)
        data = numpy.frombuffer(f.getvalue(), dtype=numpy.uint8).copy()
        n = _i64([len(data)])
    else:
        n = _i64([0])
    _check(_L().gorun_broadcast(_c(), _buffer(n)[0], 1, 3, root))
    if rank() != root:
        data = numpy.empty(int(n[0]), dtype=numpy.uint8)
    if len(data):
        p, cnt, dt = _buffer(data)
        _check(_L().gorun_broadcast(_c(), p, cnt, dt, root))
    if rank() == root:
        return obj
    f = io.BytesIO(data.tobytes())
    try:
        import torch
        return torch.load(f)
    except ImportError:
        return pickle.load(f)
