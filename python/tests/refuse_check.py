"""Run under `gorun -np 3 /usr/bin/python3 python/tests/refuse_check.py`,
with GORUN_TIMEOUT far beyond LIMIT: in each case one rank passes an
argument the package refuses itself (a root out of range, an op its
element type lacks, a tensor not contiguous, a read-only array, a length
size does not divide, a create_group list without it, a send's or recv's
peer out of range or tag outside int32) while the others pass good ones. The refusing rank raises ValueError or TypeError; every
other rank raises GorunError naming it within LIMIT seconds, where they
used to wait for it until GORUN_TIMEOUT. Each case runs on a group of
every rank, which the refusal aborts, so the groups refuse on their own
communicator; the job's communicator goes on. Prints
"refuse_check: rank R ok"."""
import faulthandler
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gorun  # noqa: E402
from checking import spent, usable  # noqa: E402

LIMIT = 60  # seconds; GORUN_TIMEOUT is 10 minutes


def expect(cond, msg):
    if not cond:
        raise SystemExit("refuse_check: rank %d: %s" % (gorun.rank(), msg))


def case(what, bad, kind, call):
    """call(g, r) on a new group g of every rank, where rank bad alone
    passes an argument refused with kind."""
    r, n = gorun.rank(), gorun.size()
    with gorun.create_group(range(n)) as g:
        g.barrier()  # every rank has made g: a refusal on it cannot fail another's making
        # A call that waits past LIMIT prints where it waits and exits 1.
        faulthandler.dump_traceback_later(LIMIT, exit=True)
        t0 = time.monotonic()
        try:
            call(g, r)
        except kind as e:
            expect(r == bad, "%s: %s on a rank whose arguments passed: %s" % (what, kind.__name__, e))
            err = e
        except gorun.GorunError as e:
            expect(r != bad, "%s: the refusing rank got GorunError, not %s: %s" % (what, kind.__name__, e))
            expect(e.status == 2 and "rank %d" % bad in str(e),
                   "%s: status %d, want 2 naming rank %d: %s" % (what, e.status, bad, e))
            err = e
        else:
            expect(False, "%s: no error" % what)
        took = time.monotonic() - t0
        faulthandler.cancel_dump_traceback_later()
        expect(took < LIMIT, "%s: failed after %.1f s" % (what, took))
        print("refuse_check: rank %d: %s (%.2f s): %s" % (r, what, took, err), flush=True)
        spent(g, expect, "%s: the group still worked after the refusal" % what)
        gorun.barrier()  # nobody frees g while another rank is still in the case


def star(g, r, bad, dst=None, tag=0, out=None, into=None):
    """Rank bad exchanges four float32s with every other rank, all
    isends and irecvs started before the first wait: every other rank
    needs its message. Rank bad sends out (else ones) to dst (else each
    rank in turn) with tag, and receives into into (else zeros), which is
    made read-only."""
    n = g.size()
    if r != bad:
        hs = [g.irecv(np.zeros(4, dtype=np.float32), bad), g.isend(np.ones(4, dtype=np.float32), bad)]
    else:
        hs = []
        for k in range(n):
            if k == bad:
                continue
            if into is not None:
                into.flags.writeable = False
            hs.append(g.isend(np.ones(4, dtype=np.float32) if out is None else out, k if dst is None else dst, tag))
            hs.append(g.irecv(np.zeros(4, dtype=np.float32) if into is None else into, k))
    for h in hs:
        h.wait()


def main():
    gorun.init()
    r, n = gorun.rank(), gorun.size()
    expect(n >= 3, "needs 3 ranks or more, has %d" % n)
    # Every case is a call in which every other rank needs the refusing
    # rank's part: a rank that needs none (a broadcast's root, a leaf of
    # its tree) may finish its part first, and rightly succeed.
    case("broadcast_ from rank 1, whose root is out of range", 1, ValueError,
         lambda g, r: g.broadcast_(torch.ones(4), root=n if r == 1 else 1))
    case("allreduce_, rank 2's band on floats", 2, TypeError,
         lambda g, r: g.allreduce_(torch.ones(4), op="band" if r == 2 else "max"))
    case("allreduce_, rank 0's tensor not contiguous", 0, ValueError,
         lambda g, r: g.allreduce_(torch.ones(4, 4).t() if r == 0 else torch.ones(4, 4)))

    def read_only(g, r):
        x = np.ones(8, dtype=np.float32)
        x.flags.writeable = r != 1
        g.allreduce_(x)
    case("allreduce_, rank 1's read-only array", 1, ValueError, read_only)
    case("allreduce_, rank 1's complex array", 1, TypeError,
         lambda g, r: g.allreduce_(np.ones(4, dtype=np.complex64 if r == 1 else np.float32)))
    case("reduce_scatter, rank 2's length not divisible", 2, ValueError,
         lambda g, r: g.reduce_scatter(torch.ones(3 * n + (r == 2))))
    case("iallreduce_, rank 0's unknown op", 0, ValueError,
         lambda g, r: g.iallreduce_(torch.ones(4), op="nope" if r == 0 else "sum").wait())
    case("alltoall, rank 2's splits", 2, ValueError,
         lambda g, r: g.alltoall(torch.ones(n, 2), splits=[n + 1] + [0] * (n - 1) if r == 2 else None))
    case("create_group, rank 1's list without it", 1, ValueError,
         lambda g, r: g.create_group([k for k in range(n) if k != 1] if r == 1 else range(n)))
    case("isend, rank 1's destination out of range", 1, ValueError,
         lambda g, r: star(g, r, 1, dst=n))
    case("isend, rank 2's tensor not contiguous", 2, ValueError,
         lambda g, r: star(g, r, 2, out=torch.ones(2, 2).t()))
    case("isend, rank 0's tag outside int32", 0, ValueError,
         lambda g, r: star(g, r, 0, tag=1 << 31))
    case("irecv, rank 2's read-only array", 2, ValueError,
         lambda g, r: star(g, r, 2, into=np.zeros(4, dtype=np.float32)))
    case("recv, rank 0's source out of range", 0, ValueError,
         lambda g, r: g.recv(np.zeros(4, dtype=np.float32), -1 if r == 0 else 0))
    case("send, rank 1's destination out of range", 1, ValueError,
         lambda g, r: g.send(np.ones(4, dtype=np.float32), n + 1) if r == 1 else g.recv(np.zeros(4, dtype=np.float32), 1))
    case("ireduce_scatter, rank 0's unknown op", 0, ValueError,
         lambda g, r: g.ireduce_scatter(torch.ones(2 * n), op="nope" if r == 0 else "sum").wait())
    case("scan, rank 0's bor on floats", 0, TypeError,
         lambda g, r: g.scan(torch.ones(3), op="bor" if r == 0 else "sum"))

    usable(gorun, expect, "the job's communicator after the refusals")
    gorun.finalize()
    print("refuse_check: rank %d ok" % r, flush=True)


if __name__ == "__main__":
    main()
