"""Run under `gorun -np 3 /usr/bin/python3 python/tests/package_check.py`:
the Python package's reduce, gather, scatter, alltoall,
broadcast_optimizer_state and join (uneven inputs, with op avg and sum,
against a single-process reference); allgather along the first dimension,
which may differ between ranks; create_group's Group on 2 of the 3 ranks;
join, broadcast_parameters and broadcast_optimizer_state on such a group;
DistributedOptimizer's synchronize() then step(), and skip_synchronize(),
reducing once; read-only inputs; arguments refused locally (each aborts
its communicator, a group of every rank); DistributedOptimizer with a parameter one rank
leaves unused, and with one backward pass too many. Prints
"package_check: rank R ok"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gorun  # noqa: E402
from checking import spent, usable  # noqa: E402


def expect(cond, msg):
    if not cond:
        raise SystemExit("package_check: rank %d: %s" % (gorun.rank(), msg))


def collectives(r, n):
    red = gorun.reduce(np.array([r + 1, -r], dtype=np.int32), op="max", root=1)
    expect((red.tolist() == [n, 0]) if r == 1 else red is None, "reduce %s" % red)
    t = gorun.reduce(torch.full((2, 2), float(r)), root=0)
    expect(t is None if r else torch.equal(t, torch.full((2, 2), float(n * (n - 1) / 2))), "torch reduce")
    g = gorun.gather(torch.tensor([r, r * r]), root=2)
    expect(g is None if r != 2 else g.tolist() == [[k, k * k] for k in range(n)], "gather %s" % g)
    src = np.arange(n * 2 * 3, dtype=np.float64).reshape(n * 2, 3) if r == 0 else np.zeros(1)
    s = gorun.scatter(src, root=0)
    expect(s.shape == (2, 3) and s[0, 0] == 6 * r and s[1, 2] == 6 * r + 5, "scatter %s" % s)
    # alltoall with uneven splits: b+1 rows of width 2 to rank b
    x = torch.cat([torch.full((b + 1, 2), float(10 * r + b)) for b in range(n)])
    got, splits = gorun.alltoall(x, splits=[b + 1 for b in range(n)])
    expect(splits == [r + 1] * n, "alltoall splits %s" % splits)
    want = torch.cat([torch.full((r + 1, 2), float(10 * a + r)) for a in range(n)])
    expect(torch.equal(got, want), "alltoall %s" % got)
    even, sp = gorun.alltoall(np.arange(n, dtype=np.int64) + 100 * r)
    expect(even.tolist() == [100 * a + r for a in range(n)] and sp == [1] * n, "even alltoall %s" % even)
    bits = np.array([1 << r], dtype=np.uint8)
    gorun.allreduce_(bits, op="bor")
    expect(bits[0] == (1 << n) - 1, "bor %s" % bits)


def net():
    torch.manual_seed(3)
    return torch.nn.Linear(4, 2)


def optimizer_state(r, group=None):
    """r: this rank's number in group, if given."""
    model = net()
    opt = torch.optim.Adam(model.parameters(), lr=0.1 * (r + 1))
    if r == 0:  # only root has trained: it has moments and a step count
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
    gorun.broadcast_optimizer_state(opt, root=0, group=group)
    st = opt.state_dict()
    expect(st["param_groups"][0]["lr"] == 0.1, "lr %s" % st["param_groups"][0]["lr"])
    expect(len(st["state"]) == 2 and float(st["state"][0]["step"]) == 1.0, "state %s" % st["state"].keys())
    m = st["state"][0]["exp_avg"].clone()
    (group or gorun).allreduce_(m, op="max")
    expect(torch.equal(m, st["state"][0]["exp_avg"]), "moments differ between ranks")


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)


def step_style(opt, params, style):
    """Each way of stepping a DistributedOptimizer reduces the gradients
    exactly once: a plain step(); synchronize(), clip_grad_norm_ (a no-op
    at this bound) and step(); synchronize() and step() inside
    skip_synchronize()."""
    if style == 0:
        opt.step()
    elif style == 1:
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(params, 1e6)
        opt.step()
    else:
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()


def uneven(r, n, op="avg", mixed=False, group=None):
    """Rank r has 2 + r batches; join averages (or sums) over the ranks
    still going. mixed: each rank steps in another style each step
    (step_style), which must not change the collectives it issues. group:
    train in it (r, n: this rank's number in it and its size)."""
    counts = [2 + k for k in range(n)]
    model = net()
    opt = gorun.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), group=group,
                                     named_parameters=model.named_parameters(), uneven_inputs=True, op=op)
    for step in range(counts[r]):
        x, y = batch(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        step_style(opt, list(model.parameters()), (step + r) % 3 if mixed else 0)
    last = gorun.join(opt)
    expect(last == n - 1, "join returned %d, want %d" % (last, n - 1))
    gorun.broadcast_parameters(model.state_dict(), root=last, group=group)  # joined ranks stopped stepping
    ref = net()
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(max(counts)):
        active = [k for k in range(n) if step < counts[k]]
        grads = []
        for k in active:
            ref.zero_grad()
            x, y = batch(k, step)
            torch.nn.functional.mse_loss(ref(x), y).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / (len(active) if op == "avg" else 1)
        sgd.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        expect(torch.allclose(a, b, rtol=1e-5, atol=1e-6),
               "join (op %s) result %s, want %s" % (op, a.tolist(), b.tolist()))


def synchronize_then_step(r, n):
    """synchronize() then step() reduces once: with op "sum" the gradients
    are the ranks' sum, not size times it, in every step_style."""
    m = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        m.weight.zero_()
    opt = gorun.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0),
                                     named_parameters=m.named_parameters(), op="sum")
    total = n * (n + 1) / 2  # rank r's gradient is r + 1 in every entry
    for k, style in enumerate([1, 2, 0, 1]):
        opt.zero_grad()
        m(torch.full((1, 4), float(r + 1))).sum().backward()
        step_style(opt, [m.weight], style)
        expect(torch.allclose(m.weight.grad, torch.full((1, 4), total)),
               "step %d (style %d): grad %s, want %s" % (k, style, m.weight.grad.tolist(), total))
        expect(torch.allclose(m.weight, torch.full((1, 4), -total * (k + 1))),
               "step %d (style %d): weight %s, want %s" % (k, style, m.weight.tolist(), -total * (k + 1)))


def compressed_avg(r, n):
    """compression="fp16" with op "avg" divides before it rounds, as
    torch's fp16_compress_hook: rank r's gradient is 20000 + 10000 r, whose
    sum over 3 ranks (90000) does not fit fp16 (65504) where the average
    does; with uneven inputs too, where rank 0 joins after one step and the
    second step averages ranks 1 and 2 only."""
    for uneven in (False, True):
        m = torch.nn.Linear(4, 1, bias=False)
        with torch.no_grad():
            m.weight.zero_()
        opt = gorun.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0), compression="fp16",
                                         named_parameters=m.named_parameters(), uneven_inputs=uneven)
        for step in range(1 if uneven and r == 0 else 2):
            opt.zero_grad()
            m(torch.full((1, 4), 20000.0 + 10000 * r)).sum().backward()
            opt.synchronize()
            active = range(1 if uneven and step == 1 else 0, n)
            want = sum(20000.0 + 10000 * k for k in active) / len(active)
            expect(torch.allclose(m.weight.grad, torch.full((1, 4), want), rtol=2e-3),
                   "fp16 avg (uneven %s) step %d: grad %s, want %s" % (uneven, step, m.weight.grad.tolist(), want))
        if uneven:
            gorun.join(opt)


def allgather_shapes(r, n):
    """allgather concatenates along the first dimension, which may differ
    between ranks (Horovod's allgather); inputs that do not fit together
    raise on every rank and leave the communicator usable."""
    g = gorun.allgather(np.full((2, 3), r, dtype=np.int32))
    expect(g.shape == (2 * n, 3) and g.tolist() == [[k] * 3 for k in range(n) for _ in range(2)], "even %s" % g)
    t = gorun.allgather(torch.full((r + 1, 2, 2), float(r), dtype=torch.bfloat16))
    want = torch.cat([torch.full((k + 1, 2, 2), float(k), dtype=torch.bfloat16) for k in range(n)])
    expect(t.dtype == torch.bfloat16 and torch.equal(t, want), "uneven torch %s" % t)
    e = gorun.allgather(torch.arange(3 * r, dtype=torch.int64).reshape(r, 3))  # rank 0 sends no rows
    want = torch.cat([torch.arange(3 * k, dtype=torch.int64).reshape(k, 3) for k in range(n)])
    expect(torch.equal(e, want), "with an empty rank %s" % e)
    v = gorun.allgather(np.arange(r, dtype=np.float64))
    expect(v.tolist() == [float(j) for k in range(n) for j in range(k)], "uneven 1-d %s" % v)
    z = gorun.allgather(np.array(r * 1.5))
    expect(z.shape == (n,) and z.tolist() == [k * 1.5 for k in range(n)], "0-d %s" % z)
    cases = [
        (ValueError, "beyond the first dimension", lambda: gorun.allgather(np.zeros((1, 2 + (r == 1))))),
        (ValueError, "beyond the first dimension", lambda: gorun.allgather(np.zeros((2,) if r else (2, 1)))),
        (TypeError, "element types differ", lambda: gorun.allgather(torch.zeros(2, dtype=torch.float64 if r == n - 1 else torch.float32))),
        (ValueError, "contiguous" if r == 1 else "rank 1", lambda: gorun.allgather(torch.ones(4, 4).t() if r == 1 else torch.ones(4, 4))),
    ]
    for i, (kind, words, call) in enumerate(cases):
        try:
            got = call()
        except kind as e:
            expect(words in str(e), "allgather case %d: message %r lacks %r" % (i, str(e), words))
        except Exception as e:  # noqa: BLE001
            expect(False, "allgather case %d raised %r, want %s" % (i, e, kind.__name__))
        else:
            expect(False, "allgather case %d returned %s, want %s" % (i, got, kind.__name__))
    usable(gorun, expect, "communicator unusable after refused allgathers")


def groups(r, n):
    """create_group([2, 0]) on ranks 0 and 2 only: the group's collectives
    run over those two, numbered in the group (its rank 0 is rank 2),
    while rank 1 takes no part; a list without the caller is refused,
    aborting the communicator it was to be made from (here a group of
    every rank); a freed group raises."""
    with gorun.create_group(range(n)) as every:
        every.barrier()  # every rank has made it: a refusal on it cannot fail another's making
        try:
            every.create_group([k for k in range(n) if k != r])
            expect(False, "a group without the caller was made")
        except ValueError:
            pass
        spent(every, expect, "the refused create_group left its communicator usable")
    if r in (0, 2):
        with gorun.create_group([2, 0]) as g:
            expect((g.rank(), g.size()) == ((0 if r == 2 else 1), 2), "group rank %d size %d" % (g.rank(), g.size()))
            x = np.array([r + 1], dtype=np.int64)
            g.allreduce_(x)
            expect(x[0] == 4, "group allreduce %s" % x)
            y = g.broadcast_(torch.tensor([float(r)]), root=0)
            expect(y.item() == 2.0, "group broadcast from its rank 0 %s" % y)
            expect(g.allgather(np.array([r])).tolist() == [2, 0], "group allgather")
            red = g.reduce(np.array([r]), root=1)  # the group's rank 1 is rank 0
            expect(red is None if r == 2 else red.tolist() == [2], "group reduce %s" % red)
            h = g.iallreduce_(torch.ones(3))
            expect(torch.all(h.wait() == 2).item(), "group iallreduce")
            expect((gorun.rank(), gorun.size()) == (r, n), "the job's numbering changed inside the group")
        spent(g, expect, "a freed group still worked")
    usable(gorun, expect, "the job's communicator after the group")


def group_training(r, n):
    """DistributedOptimizer, join, broadcast_parameters and
    broadcast_optimizer_state with group=: ranks 2 and 0 (its ranks 0 and
    1) train with uneven inputs on their own, against the reference of a
    2-rank job, while rank 1 does alone, in a group of itself; the job's
    communicator is not used meanwhile. A group knows its members on this
    host (all 3 ranks share one): local_rank is the group's rank."""
    g = gorun.create_group([2, 0] if r != 1 else [1])
    expect((g.local_rank(), g.local_size()) == (g.rank(), g.size()),
           "group local rank %d size %d" % (g.local_rank(), g.local_size()))
    uneven(g.rank(), g.size(), group=g)
    optimizer_state(g.rank(), group=g)
    try:
        gorun.DistributedOptimizer(torch.optim.SGD(net().parameters(), lr=0.1), group=[0, 2])
        expect(False, "a list was taken for a group")
    except TypeError:
        pass
    g.free()


def read_only(r, n):
    """Calls that only read their input take a read-only array."""
    x = np.arange(2 * n, dtype=np.float32) + 10 * r
    x.flags.writeable = False
    expect(gorun.allgather(x).tolist() == [float(v + 10 * k) for k in range(n) for v in range(2 * n)], "allgather")
    rs = gorun.reduce_scatter(x)
    expect(rs.tolist() == [float(n * (2 * r + j) + 10 * n * (n - 1) // 2) for j in range(2)], "reduce_scatter %s" % rs)
    red = gorun.reduce(x, root=0)
    expect(red is None if r else red[1] == n * 1 + 10 * n * (n - 1) // 2, "reduce %s" % red)
    g = gorun.gather(x, root=1)
    expect(g is None if r != 1 else g[2, 0] == 20, "gather %s" % g)
    s = gorun.scatter(x, root=2)
    expect(s.tolist() == [float(2 * r + j + 20) for j in range(2)], "scatter %s" % s)
    got, _ = gorun.alltoall(x)
    expect(got.tolist() == [float(2 * r + j + 10 * k) for k in range(n) for j in range(2)], "alltoall %s" % got)


def refused(r, n):
    """Arguments every rank can check alone raise ValueError or TypeError
    before any data moves, and abort the communicator (each case runs on a
    group of every rank); the job's communicator goes on working. scatter's
    input, refused on its root, raises on every rank and leaves the
    communicator usable."""
    f = np.ones(3, dtype=np.float32)
    cases = [
        (ValueError, "broadcast_", (f,), {"root": n}),
        (ValueError, "ibroadcast_", (f,), {"root": -1}),
        (ValueError, "reduce", (f,), {"root": n + 2}),
        (ValueError, "gather", (f,), {"root": n}),
        (ValueError, "scatter", (f,), {"root": n}),
        (TypeError, "allreduce_", (f,), {"op": "band"}),
        (TypeError, "iallreduce_", (torch.ones(2),), {"op": "lor"}),
        (TypeError, "reduce", (f,), {"op": "bxor"}),
        (TypeError, "reduce_scatter", (np.ones(n, dtype=np.float64),), {"op": "land"}),
        (ValueError, "allreduce_", (f,), {"op": "nope"}),
        (ValueError, "alltoall", (np.ones(n + 1),), {}),
    ]
    for i, (kind, name, args, kwargs) in enumerate(cases):
        with gorun.create_group(range(n)) as g:
            g.barrier()  # as in groups()
            try:
                getattr(g, name)(*args, **kwargs)
            except kind:
                pass
            except Exception as e:  # noqa: BLE001
                expect(False, "case %d raised %r, want %s" % (i, e, kind.__name__))
            else:
                expect(False, "case %d raised nothing, want %s" % (i, kind.__name__))
            spent(g, expect, "case %d left its communicator usable" % i)
    with gorun.create_group(range(n)) as g:
        try:
            g.scatter(np.ones(n + 1), root=1)  # refused on root, raised everywhere
            expect(False, "scatter of a length the size does not divide")
        except ValueError:
            pass
        usable(g, expect, "communicator unusable after a refused scatter")
    usable(gorun, expect, "the job's communicator unusable after refusals in groups")


def unused_parameter(r, n):
    """Rank 0 leaves b unused: its bucket (0, the last parameters) is never
    full there, so rank 0 must hold bucket 1 (a) back until synchronize and
    not pair it with the others' bucket 0."""
    import copy
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 4, bias=False)  # 64 B: one bucket each
    b = torch.nn.Linear(4, 4, bias=False)
    x = torch.ones(1, 4)

    def loss(k, a, b):
        return (a(x) * (k + 1)).sum() if k == 0 else b(a(x) * (k + 1)).sum()
    want = [torch.zeros(4, 4), torch.zeros(4, 4)]
    for k in range(n):
        a2, b2 = copy.deepcopy(a), copy.deepcopy(b)
        loss(k, a2, b2).backward()
        for i, m in enumerate((a2, b2)):
            if m.weight.grad is not None:
                want[i] += m.weight.grad
    params = list(a.named_parameters(prefix="a")) + list(b.named_parameters(prefix="b"))
    opt = gorun.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=1.0), named_parameters=params,
                                     bucket_bytes=64, first_bucket_bytes=64, op="sum")
    for step in range(2):
        opt.zero_grad()
        loss(r, a, b).backward()
        opt.synchronize()
        expect(torch.allclose(a.weight.grad, want[0]), "step %d: a.grad %s, want %s" % (step, a.weight.grad, want[0]))
        expect(torch.allclose(b.weight.grad, want[1]), "step %d: b.grad %s, want %s" % (step, b.weight.grad, want[1]))


def extra_backward(r, n):
    """A second backward pass before step() with backward_passes_per_step=1
    raises (its gradients would be lost), naming the parameter and counts."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1, bias=False)
    opt = gorun.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0), named_parameters=m.named_parameters())
    m(torch.ones(1, 4)).sum().backward()
    try:
        m(torch.ones(1, 4)).sum().backward()
    except RuntimeError as e:
        msg = str(e)
        expect("weight" in msg and "backward_passes_per_step" in msg and "2" in msg and "1" in msg, "message: %s" % msg)
    else:
        expect(False, "a second backward pass with backward_passes_per_step=1 raised nothing")
    opt.synchronize()  # the first pass's bucket was started on every rank: finish it
    opt.zero_grad()
    m(torch.full((1, 4), float(r))).sum().backward()
    opt.synchronize()
    expect(torch.allclose(m.weight.grad, torch.full((1, 4), (n - 1) / 2)), "after the error: %s" % m.weight.grad)
    # backward_passes_per_step=2 takes two passes and sums them
    m = torch.nn.Linear(4, 1, bias=False)  # a new model: m's hooks would count these passes too
    opt2 = gorun.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0),
                                      named_parameters=m.named_parameters(), backward_passes_per_step=2)
    for k in range(2):
        m(torch.full((1, 4), float(r + 10 * k))).sum().backward()
    opt2.synchronize()
    expect(torch.allclose(m.weight.grad, torch.full((1, 4), (n - 1) + 10.0)), "two passes: %s" % m.weight.grad)


def main():
    gorun.init()
    r, n = gorun.rank(), gorun.size()
    collectives(r, n)
    allgather_shapes(r, n)
    groups(r, n)
    group_training(r, n)
    read_only(r, n)
    refused(r, n)
    optimizer_state(r)
    uneven(r, n)
    uneven(r, n, op="sum", mixed=True)
    synchronize_then_step(r, n)
    compressed_avg(r, n)
    unused_parameter(r, n)
    extra_backward(r, n)
    gorun.barrier()
    print("package_check: rank %d ok" % r, flush=True)
    gorun.finalize()


if __name__ == "__main__":
    main()
