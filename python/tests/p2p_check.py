"""Run under `gorun -np 4 /usr/bin/python3 python/tests/p2p_check.py`: the
package's point-to-point messages (send, recv, isend, irecv), ibarrier,
ireduce_scatter, scan and exscan, on the job's communicator and through a
Group of ranks 3, 1 and 2 (rank 0 takes no part), whose peers are numbered
in the group. Values are checked exactly, in every element type the
package has, numpy's and torch's. Last, on groups the failures abort: a
receive naming the wrong tag fails; a send to this rank with no irecv from
it is refused by the C ABI; a destination out of the group's range (rank
3 of the job) fails the call on every member. Prints
"p2p_check: rank R ok"."""
import gc
import os
import sys
import time
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gorun  # noqa: E402
from checking import spent, usable  # noqa: E402

NUMPY = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
         np.float16, np.float32, np.float64]
TORCH = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
         torch.float16, torch.bfloat16, torch.float32, torch.float64]
# 4 MiB messages: a dtype of each width, in both libraries
LARGE = [("np", np.uint8), ("np", np.float32), ("torch", torch.bfloat16), ("torch", torch.int64)]
MIB4 = 4 << 20


def expect(cond, msg):
    if not cond:
        raise SystemExit("p2p_check: rank %d: %s" % (gorun.rank(), msg))


def payload(lib, dtype, count, src, salt):
    """The message rank src sends in case salt: integers in [0, 100],
    exact in every dtype (bfloat16 holds integers up to 256)."""
    v = (np.arange(count, dtype=np.int64) * 7 + 13 * src + 31 * salt) % 101
    return v.astype(dtype) if lib == "np" else torch.from_numpy(v).to(dtype)


def zeros(lib, dtype, count):
    return np.zeros(count, dtype=dtype) if lib == "np" else torch.zeros(count, dtype=dtype)


def same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)


def width(lib, dtype):
    return np.dtype(dtype).itemsize if lib == "np" else torch.empty(0, dtype=dtype).element_size()


def ring(c, r, n):
    """Every rank isends to its right and irecvs from its left, both
    started before either wait (in either order), for every dtype at 1 and
    37 elements and 4 MiB for some."""
    right, left = (r + 1) % n, (r - 1) % n
    cases = [(lib, dt, k) for lib, dts in (("np", NUMPY), ("torch", TORCH)) for dt in dts for k in (1, 37)]
    cases += [(lib, dt, MIB4 // width(lib, dt)) for lib, dt in LARGE]
    for i, (lib, dt, count) in enumerate(cases):
        out, into = payload(lib, dt, count, r, i), zeros(lib, dt, count)
        if i % 2:
            hs, hr = c.isend(out, right, tag=i), c.irecv(into, left, tag=i)
        else:
            hr, hs = c.irecv(into, left, tag=i), c.isend(out, right, tag=i)
        first, second = (hr, hs) if i % 3 else (hs, hr)
        first.wait()
        second.wait()
        expect(hr.wait() is into and hs.wait() is out, "ring %s %s: wait returned another buffer" % (lib, dt))
        expect(same(into, payload(lib, dt, count, left, i)),
               "ring %s %s x%d from %d: got %s" % (lib, dt, count, left, into[:5]))
        expect(same(out, payload(lib, dt, count, r, i)), "ring %s %s: isend changed its buffer" % (lib, dt))


def tags(c, r, n):
    """Two messages from each rank to its right in flight at once, tags -3
    (negative tags are valid) and 11, received in order under their tags;
    a message to this rank itself, matched in its group."""
    right, left = (r + 1) % n, (r - 1) % n
    a, b = payload("np", np.int32, 5, r, 100), payload("torch", torch.int32, 5, r, 101)
    ra, rb = zeros("np", np.int32, 5), zeros("torch", torch.int32, 5)
    hs = [c.isend(a, right, tag=-3), c.isend(b, right, tag=11), c.irecv(ra, left, tag=-3), c.irecv(rb, left, tag=11)]
    for h in reversed(hs):
        h.wait()
    expect(same(ra, payload("np", np.int32, 5, left, 100)) and same(rb, payload("torch", torch.int32, 5, left, 101)),
           "tagged messages %s %s" % (ra, rb))
    x, y = payload("np", np.int16, 9, r, 102), zeros("np", np.int16, 9)
    hs, hr = c.isend(x, r, tag=5), c.irecv(y, r, tag=5)
    expect(hr.wait() is y and same(y, x), "message to itself %s" % y)
    hs.wait()


def dropped(c, r, n):
    """An isend and an irecv whose Handles are dropped unwaited: gorun
    still reads and writes their buffers, so the package keeps them alive
    (a freed receive buffer would be written into) until the operations
    end, and lets them go after. The barrier runs the pair first (the
    communicator's order), so the message has landed when it returns."""
    right, left = (r + 1) % n, (r - 1) % n
    count = (1 << 20) // 4
    out, into = payload("np", np.int32, count, r, 103), zeros("np", np.int32, count)
    sent, got = weakref.ref(out), weakref.ref(into)
    c.irecv(into, left, tag=7)
    c.isend(out, right, tag=7)
    del out, into
    gc.collect()
    expect(sent() is not None and got() is not None, "a dropped Handle let go of its buffers before the operation ran")
    c.barrier()
    into = got()
    expect(into is not None and same(into, payload("np", np.int32, count, left, 103)),
           "the dropped irecv's buffer: %s" % (None if into is None else into[:5]))
    del into
    c.ibarrier().wait()  # a new Handle releases the ended operations' buffers
    gc.collect()
    expect(sent() is None and got() is None, "the dropped Handles' buffers were kept after their operations ended")


def pairs(c, r, n):
    """Blocking send and recv between ranks 2k and 2k+1: the even one
    sends first, the odd one receives first, then the other way, at 3
    elements and 4 MiB; a rank without a partner (odd n) sits out."""
    peer = r ^ 1
    if peer >= n:
        return
    for i, (lib, count) in enumerate([("np", 3), ("torch", 3), ("np", MIB4 // 4), ("torch", MIB4 // 4)]):
        out = payload(lib, np.float32 if lib == "np" else torch.float32, count, r, 200 + i)
        into = zeros(lib, out.dtype, count)
        if r % 2 == 0:
            expect(c.send(out, peer, tag=7) is None, "send returned a value")
            got = c.recv(into, peer, tag=8)
        else:
            got = c.recv(into, peer, tag=7)
            c.send(out, peer, tag=8)
        expect(got is into and same(into, payload(lib, out.dtype, count, peer, 200 + i)),
               "pair %s x%d from %d: got %s" % (lib, count, peer, into[:5]))


def ibarrier(c, r, n, signal):
    """Every rank but the last starts c.ibarrier, finds it unfinished (the
    last rank starts it only after the others reach signal's barrier, a
    communicator of the same ranks), computes, then waits for it."""
    last = n - 1
    if r == last:
        signal.barrier()
        expect(c.ibarrier().wait() is None, "ibarrier's wait returned a value")
        return
    h = c.ibarrier()
    expect(h.test() is False and gorun.poll(h) is False, "ibarrier finished before rank %d started it" % last)
    m = torch.arange(64 * 64, dtype=torch.float64).reshape(64, 64) / 4096
    s = (m @ m).sum().item()  # overlapped with the barrier
    signal.barrier()
    expect(h.wait() is None and h.test() is True, "ibarrier's wait")
    expect(s == (m @ m).sum().item(), "computation")


def ireduce_scatter(c, r, n):
    """ireduce_scatter's blocks, the input kept alive by the Handle."""
    x = torch.arange(3 * n, dtype=torch.float32) * (r + 1)
    kept = weakref.ref(x)
    h = c.ireduce_scatter(x)
    del x
    gc.collect()
    expect(kept() is not None, "the Handle let go of ireduce_scatter's input")
    got = h.wait()
    want = torch.arange(3 * r, 3 * r + 3, dtype=torch.float32) * (n * (n + 1) // 2)
    expect(torch.equal(got, want), "ireduce_scatter sum %s, want %s" % (got, want))
    y = np.arange(2 * n, dtype=np.int64) + 10 * r
    got = c.ireduce_scatter(y, op="max").wait()
    expect(got.tolist() == [2 * r + 10 * (n - 1), 2 * r + 1 + 10 * (n - 1)], "ireduce_scatter max %s" % got)
    z = torch.arange(2 * n, dtype=torch.float16) * (r + 1)
    got = c.ireduce_scatter(z, op="avg").wait()
    want = torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) * (n + 1) / 2
    expect(got.dtype == torch.float16 and torch.equal(got.float(), want), "ireduce_scatter avg %s" % got)


def scans(c, r, n):
    """scan and exscan with sum, prod, max and avg (avg divides by the
    ranks reduced); exscan gives None on rank 0."""
    tri = (r + 1) * (r + 2) // 2
    x = np.array([[r + 1, -(r + 1)], [2, 1]], dtype=np.int32)
    x.flags.writeable = False
    s = c.scan(x)
    expect(s.shape == (2, 2) and s.dtype == np.int32 and s.tolist() == [[tri, -tri], [2 * (r + 1), r + 1]],
           "scan sum %s" % s)
    expect(x.tolist() == [[r + 1, -(r + 1)], [2, 1]], "scan changed its input")
    fact = 1
    for k in range(1, r + 2):
        fact *= k
    expect(c.scan(np.array([r + 1], dtype=np.int64), op="prod").tolist() == [fact], "scan prod")
    t = c.scan(torch.full((3,), float(r + 1), dtype=torch.bfloat16), op="max")
    expect(t.dtype == torch.bfloat16 and torch.equal(t.float(), torch.full((3,), float(r + 1))), "scan max %s" % t)
    a = c.scan(torch.tensor([r + 1.0, 2.0], dtype=torch.float64), op="avg")
    expect(a.tolist() == [(r + 2) / 2, 2.0], "scan avg %s" % a)
    e = c.exscan(np.array([r + 1, 5], dtype=np.int64))
    expect(e is None if r == 0 else e.tolist() == [r * (r + 1) // 2, 5 * r], "exscan sum %s" % e)
    e = c.exscan(torch.tensor([r], dtype=torch.int16), op="max")
    expect(e is None if r == 0 else e.tolist() == [r - 1], "exscan max %s" % e)
    e = c.exscan(np.full((2, 2), r + 1.0, dtype=np.float16), op="avg")
    expect(e is None if r == 0 else (e.shape == (2, 2) and e.dtype == np.float16 and np.all(e == (r + 1) / 2)),
           "exscan avg %s" % e)


def exercise(c, r, n, signal):
    ring(c, r, n)
    tags(c, r, n)
    pairs(c, r, n)
    dropped(c, r, n)
    ibarrier(c, r, n, signal)
    ireduce_scatter(c, r, n)
    scans(c, r, n)


def tag_mismatch(r):
    """A receive naming a tag its message does not carry fails: rank 1
    receives tag 2 where rank 0 sent tag 1, on a group of every rank."""
    with gorun.create_group(range(gorun.size())) as g:
        g.barrier()
        if r == 0:
            try:
                g.send(np.ones(4, dtype=np.float32), 1, tag=1)
            except gorun.GorunError:
                pass  # the receiver's failure may reach the send
        elif r == 1:
            try:
                got = g.recv(np.zeros(4, dtype=np.float32), 0, tag=2)
                expect(False, "a receive of tag 2 took a message of tag 1: %s" % got)
            except gorun.GorunError as e:
                expect("disagree" in str(e), "tag mismatch: %s" % e)
        gorun.barrier()  # nobody frees g while another rank is still in it


def lone_self_send(r):
    """A send to this rank with no irecv from it started could never
    complete: the C ABI refuses it, status 1 on rank 0, and the others,
    in a barrier that needs rank 0, fail naming it (status 2)."""
    with gorun.create_group(range(gorun.size())) as g:
        g.barrier()
        try:
            if r == 0:
                g.send(np.ones(2, dtype=np.float32), 0)
            else:
                g.barrier()
            expect(False, "a send to itself alone went on")
        except gorun.GorunError as e:
            expect(e.status == (1 if r == 0 else 2) and "rank 0" in str(e), "send to itself alone: %s" % e)
        gorun.barrier()


def refused_peer(r):
    """In the group of ranks 3, 1 and 2, its rank 0 (rank 3 of the job)
    isends to 3, a rank of the job but not of the group: it raises
    ValueError; its two peers, waiting for its messages, raise GorunError
    naming their group's rank 0, at once."""
    if r != 0:
        with gorun.create_group([3, 1, 2]) as g:
            g.barrier()
            gr = g.rank()
            t0 = time.monotonic()
            try:
                if gr == 0:
                    hs = [g.isend(torch.ones(4), 3), g.irecv(torch.zeros(4), 1), g.irecv(torch.zeros(4), 2)]
                else:
                    hs = [g.irecv(torch.zeros(4), 0), g.isend(torch.ones(4), 0)]
                for h in hs:
                    h.wait()
                expect(False, "the exchange with a destination out of the group's range went on")
            except ValueError as e:
                expect(gr == 0 and "destination 3 out of range [0, 3)" in str(e), "group rank %d: %s" % (gr, e))
            except gorun.GorunError as e:
                expect(gr != 0 and e.status == 2 and "rank 0" in str(e), "group rank %d: %s" % (gr, e))
            took = time.monotonic() - t0
            expect(took < 60, "the refusal took %.1f s" % took)
            spent(g, expect, "the group still worked after the refusal")
    gorun.barrier()


def main():
    gorun.init()
    r, n = gorun.rank(), gorun.size()
    expect(n == 4, "needs 4 ranks, has %d" % n)
    with gorun.create_group(range(n)) as signal:
        exercise(gorun, r, n, signal)
    if r != 0:
        with gorun.create_group([3, 1, 2]) as g, gorun.create_group([3, 1, 2]) as signal:
            expect(g.size() == 3 and g.rank() == [3, 1, 2].index(r), "group rank %d" % g.rank())
            exercise(g, g.rank(), g.size(), signal)
    gorun.barrier()
    tag_mismatch(r)
    lone_self_send(r)
    refused_peer(r)
    usable(gorun, expect, "the job's communicator at the end")
    gorun.finalize()
    print("p2p_check: rank %d ok" % r, flush=True)


if __name__ == "__main__":
    main()
