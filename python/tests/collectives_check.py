"""Run under `gorun -np N /usr/bin/python3 python/tests/collectives_check.py`:
checks gorun's Python collectives on numpy arrays and torch tensors and
prints "collectives_check: rank R ok"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gorun  # noqa: E402
from checking import spent  # noqa: E402


def expect(cond, msg):
    if not cond:
        raise SystemExit("collectives_check: rank %d: %s" % (gorun.rank(), msg))


def main():
    gorun.init()
    r, n = gorun.rank(), gorun.size()
    expect(0 <= gorun.local_rank() < gorun.local_size(), "local rank")

    a = np.arange(1000, dtype=np.float32) * (r + 1)
    gorun.allreduce_(a)
    expect(np.array_equal(a, np.arange(1000, dtype=np.float32) * (n * (n + 1) // 2)), "numpy allreduce")
    m = np.array([r, -r], dtype=np.int64)
    gorun.allreduce_(m, op="max")
    expect(m.tolist() == [n - 1, 0], "numpy max %s" % m)

    t = torch.full((257,), float(r + 1), dtype=torch.float64)
    gorun.allreduce_(t, op="avg")
    expect(torch.all(t == (n + 1) / 2).item(), "torch avg %s" % t[:3])
    h = torch.ones(64, dtype=torch.bfloat16) * (r + 1)
    gorun.allreduce_(h)
    expect(torch.all(h.float() == n * (n + 1) / 2).item(), "torch bf16 sum")
    y = gorun.allreduce(torch.ones(3))
    expect(torch.all(y == n).item(), "out-of-place allreduce")

    b = torch.arange(10, dtype=torch.int32) if r == n - 1 else torch.zeros(10, dtype=torch.int32)
    gorun.broadcast_(b, root=n - 1)
    expect(b.tolist() == list(range(10)), "broadcast %s" % b)

    g = gorun.allgather(np.array([r, 10 * r], dtype=np.int16))
    expect(g.tolist() == [v for k in range(n) for v in (k, 10 * k)], "allgather %s" % g)
    s = gorun.reduce_scatter(torch.arange(2 * n, dtype=torch.float32))
    expect(s.tolist() == [n * 2 * r, n * (2 * r + 1)], "reduce_scatter %s" % s)

    h1 = gorun.iallreduce_(torch.ones(100))
    h2 = gorun.ibroadcast_(torch.full((5,), float(r)), root=0)
    expect(torch.all(h1.wait() == n).item() and torch.all(h2.wait() == 0).item(), "non-blocking")

    try:
        gorun.allreduce_(torch.ones(4, 4).t())
        expect(False, "a non-contiguous tensor was accepted")
    except ValueError:
        pass
    try:
        gorun.allreduce_(np.ones(3, dtype=np.complex64))
        expect(False, "complex accepted")
    except TypeError:
        pass
    # A root out of range is refused on this rank (every rank here passes
    # the same one), as the arguments above were.
    try:
        gorun.broadcast_(torch.ones(2), root=n + 5)
        expect(False, "a root out of range was accepted")
    except ValueError as e:
        expect("root" in str(e), "root error message: %s" % e)
    # A refusal aborts the communicator, as a failed operation does: start
    # again.
    try:
        gorun.barrier()
        expect(False, "the communicator still worked after a refusal")
    except gorun.GorunError as e:
        expect(e.status in (1, 2), "barrier after a refusal: status %d: %s" % (e.status, e))
    gorun.finalize()
    gorun.init()
    gorun.barrier()
    # Last: ranks that disagree on the call (a count no rank can check
    # alone) fail on every rank, and that aborts the communicator. A rank
    # that is still finishing the barrier when a faster peer makes the bad
    # call gets the abort there, so both calls share one try.
    try:
        gorun.barrier()
        gorun.allreduce_(torch.ones(2 + (r == 0)))
        expect(False, "ranks disagreeing on the count went on")
    except gorun.GorunError as e:
        expect("disagree" in str(e) or "abort" in str(e), "mismatch error message: %s" % e)
    spent(gorun, expect, "the communicator still worked after the abort")
    gorun.finalize()
    print("collectives_check: rank %d ok" % r, flush=True)


if __name__ == "__main__":
    main()
