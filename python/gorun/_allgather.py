"""allgather for gorun's Python package, as Horovod's: the ranks' inputs
concatenated along the first dimension, which may differ between ranks.

Two collectives: first every rank's header (a refusal flag, the element
type and the shape, int64), which every rank checks alike, so that inputs
that do not fit together raise the same error on every rank before any data
moves; then the data, with gorun_allgather when the first dimensions agree
and gorun_allgatherv (one count per rank) when they differ."""
import ctypes

from . import _DTYPE_CODES, _L, _c, _check, _buffer, _empty_like, size

# The most dimensions an input may have (numpy's own limit): the header is
# of fixed length, the same on every rank.
_MAX_DIMS = 32
_HEAD = 3 + _MAX_DIMS  # refused (0, 1 ValueError, 2 TypeError), dtype code, ndim, dims

_NAMES = {code: name for name, code in _DTYPE_CODES.items()}


def _header(x):
    """This rank's header, and the error that refused x (or None)."""
    import numpy
    head = numpy.zeros(_HEAD, dtype=numpy.int64)
    try:
        _, _, dt = _buffer(x, writes=False)
        shape = tuple(int(d) for d in x.shape) or (1,)  # a 0-d input is one row of one element
        if len(shape) > _MAX_DIMS:
            raise ValueError("gorun: allgather takes at most %d dimensions, not %d" % (_MAX_DIMS, len(shape)))
    except (ValueError, TypeError) as e:
        head[0] = 2 if isinstance(e, TypeError) else 1
        return head, e
    head[1], head[2] = dt, len(shape)
    head[3:3 + len(shape)] = shape
    return head, None


def _shape(h):
    return tuple(int(d) for d in h[3:3 + int(h[2])])


def _agree(heads, refused):
    """Raise on every rank alike when some rank's input was refused or the
    inputs do not fit together; else the ranks' shapes."""
    bad = [r for r in range(len(heads)) if heads[r][0]]
    if bad:
        if refused is not None:
            raise refused
        kind = TypeError if heads[bad[0]][0] == 2 else ValueError
        raise kind("gorun: allgather: rank %d refused its input (its error says why)" % bad[0])
    shapes = [_shape(h) for h in heads]
    for r in range(1, len(heads)):
        if heads[r][1] != heads[0][1]:
            raise TypeError("gorun: allgather: the ranks' element types differ: rank 0 has %s, rank %d %s"
                            % (_NAMES[int(heads[0][1])], r, _NAMES[int(heads[r][1])]))
        if shapes[r][1:] != shapes[0][1:]:
            raise ValueError("gorun: allgather: the ranks' shapes differ beyond the first dimension: "
                             "rank 0 has %s, rank %d %s" % (shapes[0], r, shapes[r]))
    return shapes


def allgather(x):
    """Every rank's x concatenated along the first dimension in rank order,
    as Horovod's allgather: a new tensor/array of shape (the sum of the
    ranks' first dimensions, *x.shape[1:]). The first dimension may differ
    between ranks; the other dimensions and the element type must match. A
    0-d x counts as shape (1,). Inputs that do not fit together, or one a
    rank cannot send (not contiguous, an unsupported type), raise
    ValueError or TypeError on every rank before any data moves, and the
    communicator stays usable."""
    import numpy
    s, L = size(), _L()
    head, refused = _header(x)
    heads = numpy.empty(s * _HEAD, dtype=numpy.int64)
    hp, hn, hdt = _buffer(head)
    _check(L.gorun_allgather(_c(), hp, _buffer(heads)[0], hn, hdt))
    heads = heads.reshape(s, _HEAD)
    shapes = _agree(heads, refused)
    rest = shapes[0][1:]
    row = 1
    for d in rest:
        row *= d
    rows = [sh[0] for sh in shapes]
    out = _empty_like(x, sum(rows) * row).reshape((sum(rows),) + rest)
    if sum(rows) * row == 0:
        return out
    p, n, dt = _buffer(x, writes=False)
    q = _buffer(out)[0]
    if all(k == rows[0] for k in rows):
        _check(L.gorun_allgather(_c(), p, q, n, dt))
    else:
        counts = (ctypes.c_size_t * s)(*[k * row for k in rows])
        _check(L.gorun_allgatherv(_c(), p, n, q, counts, None, dt))
    return out
