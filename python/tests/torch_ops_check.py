"""Run under `gorun -np 3 /usr/bin/python3 python/tests/torch_ops_check.py`:
every torch.distributed op on backend "gorun" against its definition, then
torch's own distributed code unchanged -- ZeroRedundancyOptimizer, DDP with
gradient_as_bucket_view and static_graph, a model-parallel send/recv
pipeline -- against torch's Gloo backend (a second process group in the
same job) or a single-process reference. Prints "torch_ops_check: rank R ok".
"""
import faulthandler
import os
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook  # noqa: E402
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

R = N = 0


def expect(cond, msg):
    if not cond:
        raise SystemExit("torch_ops_check: rank %d: %s" % (R, msg))


def same(a, b, msg, rtol=0, atol=0):
    ok = torch.allclose(a, b, rtol=rtol, atol=atol) if rtol or atol else torch.equal(a, b)
    if not ok and a.numel() > 8:
        d = (a.double() - b.double()).abs()
        expect(False, "%s: max difference %g at %s (rtol %g, atol %g)" % (msg, d.max().item(), divmod(int(d.argmax()), a.shape[-1]), rtol, atol))
    expect(ok, "%s: %s, want %s" % (msg, a.tolist(), b.tolist()))


def ops():
    ranks = torch.arange(N)
    # allreduce with every ReduceOp
    x = torch.tensor([R + 1.0, -(R + 1.0), 2.0])
    for op, want in [(dist.ReduceOp.SUM, torch.tensor([N * (N + 1) / 2, -N * (N + 1) / 2, 2.0 * N])),
                     (dist.ReduceOp.PRODUCT, torch.tensor([float(torch.arange(1, N + 1).prod()),
                                                           float((-torch.arange(1, N + 1)).prod()), 2.0 ** N])),
                     (dist.ReduceOp.MIN, torch.tensor([1.0, -float(N), 2.0])),
                     (dist.ReduceOp.MAX, torch.tensor([float(N), -1.0, 2.0])),
                     (dist.ReduceOp.AVG, torch.tensor([(N + 1) / 2, -(N + 1) / 2, 2.0]))]:
        t = x.clone()
        dist.all_reduce(t, op=op)
        same(t, want, "all_reduce %s" % op, rtol=1e-6)
    b = torch.tensor([1 << R, 0xff, 1 << R, 5], dtype=torch.int32)
    for op, i, want in [(dist.ReduceOp.BOR, 0, (1 << N) - 1), (dist.ReduceOp.BAND, 1, 0xff),
                        (dist.ReduceOp.BXOR, 2, (1 << N) - 1), (dist.ReduceOp.BXOR, 3, 5 if N % 2 else 0)]:
        t = b[i:i + 1].clone()
        dist.all_reduce(t, op=op)
        expect(t.item() == want, "all_reduce %s = %d, want %d" % (op, t.item(), want))
    flags = torch.tensor([R == 0, True])
    dist.all_reduce(flags, op=dist.ReduceOp.BAND)
    expect(flags.tolist() == [N == 1, True], "bool BAND %s" % flags.tolist())
    # A bool SUM is OR and PRODUCT AND, as in NCCL: it used to add the
    # bytes, leaving bools of value N that ~ took for true.
    for name, want in [("SUM", [True, True, False]), ("PRODUCT", [N == 1, True, False])]:
        flags = torch.tensor([R == 0, True, False])
        dist.all_reduce(flags, op=getattr(dist.ReduceOp, name))
        expect(flags.view(torch.uint8).tolist() == [int(w) for w in want] and (~flags).tolist() == [not w for w in want],
               "bool %s: bytes %s, ~ %s" % (name, flags.view(torch.uint8).tolist(), (~flags).tolist()))
    noncontiguous()
    nested_future()
    async_barrier()
    # What the backend refuses (a bitwise op on floats, an output of another
    # dtype, split sizes that do not fit...) aborts the group:
    # torch_refuse_check.py checks each.

    # broadcast, reduce
    t = torch.full((4,), float(R))
    dist.broadcast(t, src=N - 1)
    same(t, torch.full((4,), float(N - 1)), "broadcast")
    t = torch.full((3,), float(R + 1), dtype=torch.float64)
    dist.reduce(t, dst=1 % N, op=dist.ReduceOp.MAX)
    if R == 1 % N:
        same(t, torch.full((3,), float(N), dtype=torch.float64), "reduce")
    # gather, scatter
    mine = torch.tensor([R, 10 * R], dtype=torch.int64)
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(N)] if R == 0 else None
    dist.gather(mine, gather_list=outs, dst=0)
    if R == 0:
        same(torch.stack(outs), torch.stack([ranks, 10 * ranks], 1), "gather")
    got = torch.zeros(2, 2)
    ins = [torch.full((2, 2), float(100 + r)) for r in range(N)] if R == N - 1 else None
    dist.scatter(got, scatter_list=ins, src=N - 1)
    same(got, torch.full((2, 2), 100.0 + R), "scatter")
    # all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor
    ag = [torch.zeros(2) for _ in range(N)]
    dist.all_gather(ag, torch.tensor([R, R + 0.5]))
    same(torch.stack(ag), torch.stack([ranks.float(), ranks + 0.5], 1), "all_gather")
    out = torch.zeros(N * 2, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, torch.tensor([R, R], dtype=torch.bfloat16))
    same(out, ranks.repeat_interleave(2).to(torch.bfloat16), "all_gather_into_tensor")
    rs = torch.zeros(2)
    dist.reduce_scatter(rs, [torch.full((2,), float(R + b)) for b in range(N)])
    same(rs, torch.full((2,), float(N * (N - 1) / 2 + N * R)), "reduce_scatter")
    rst = torch.zeros(3, dtype=torch.int64)
    dist.reduce_scatter_tensor(rst, torch.arange(3 * N, dtype=torch.int64) * (R + 1))
    same(rst, torch.arange(3 * R, 3 * R + 3) * (N * (N + 1) // 2), "reduce_scatter_tensor")
    # all_to_all (uneven tensors) and all_to_all_single (equal and with splits)
    ins = [torch.full((b + 1,), float(R * 10 + b)) for b in range(N)]  # b+1 elements to rank b
    outs = [torch.zeros(R + 1) for _ in range(N)]
    dist.all_to_all(outs, ins)
    for a in range(N):
        same(outs[a], torch.full((R + 1,), float(a * 10 + R)), "all_to_all from %d" % a)
    a2a = torch.zeros(N, dtype=torch.int32)
    dist.all_to_all_single(a2a, torch.arange(N, dtype=torch.int32) + 100 * R)
    same(a2a, ranks.int() * 100 + R, "all_to_all_single")
    # splits count rows of a (rows, 2) tensor: rank a sends a+1+b rows to b
    insplit = [R + 1 + b for b in range(N)]
    outsplit = [a + 1 + R for a in range(N)]
    src = torch.arange(sum(insplit) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * R
    dstt = torch.zeros(sum(outsplit), 2)
    dist.all_to_all_single(dstt, src, output_split_sizes=outsplit, input_split_sizes=insplit)
    off = 0
    for a in range(N):
        start = sum(a + 1 + b for b in range(R))  # a's row offset for this rank
        want = torch.arange(start * 2, (start + outsplit[a]) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * a
        same(dstt[off:off + outsplit[a]], want, "all_to_all_single splits from %d" % a)
        off += outsplit[a]
    # send and recv with tags, around the ring in both directions
    nxt, prv = (R + 1) % N, (R - 1) % N
    msg = torch.arange(5, dtype=torch.float64) + R
    got_a, got_b = torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    reqs = [dist.isend(msg, nxt, tag=7), dist.irecv(got_a, prv, tag=7)]
    for q in reqs:
        q.wait()
    if R % 2 == 0:
        dist.send(msg * 2, prv, tag=9)
        dist.recv(got_b, nxt, tag=9)
    else:
        dist.recv(got_b, nxt, tag=9)
        dist.send(msg * 2, prv, tag=9)
    same(got_a, torch.arange(5, dtype=torch.float64) + prv, "isend/irecv")
    same(got_b, (torch.arange(5, dtype=torch.float64) + nxt) * 2, "send/recv")
    # barrier and the object collectives built on the ops above
    dist.barrier()
    objs = [None] * N
    dist.all_gather_object(objs, {"rank": R})
    expect([o["rank"] for o in objs] == list(range(N)), "all_gather_object %s" % objs)
    gathered = [None] * N if R == 0 else None
    dist.gather_object(("r", R), gathered, dst=0)
    if R == 0:
        expect(gathered == [("r", r) for r in range(N)], "gather_object %s" % gathered)
    lst = [R * 7] if R == 1 else [None]
    dist.broadcast_object_list(lst, src=1 % N)
    expect(lst == [7 if N > 1 else 0], "broadcast_object_list %s" % lst)


def noncontiguous():
    """Strided tensors (a transpose, a column), as Gloo takes them: the
    collectives used to refuse them, failing the call on every rank."""
    base = (torch.arange(12.0).reshape(3, 4) + R).t()  # (4, 3), not contiguous
    t = base.clone().t().t()
    expect(not t.is_contiguous(), "the test's tensor is contiguous")
    dist.all_reduce(t)
    same(t, (torch.arange(12.0).reshape(3, 4) * N + N * (N - 1) / 2).t(), "all_reduce of a transpose")
    col = torch.zeros(4, 3)
    col[:, 1] = R + 1.0
    dist.broadcast(col[:, 1], src=N - 1)
    same(col, torch.tensor([[0.0, N, 0.0]] * 4), "broadcast into a column")
    col[:, 1] = R + 1.0
    dist.reduce(col[:, 1], dst=0, op=dist.ReduceOp.SUM)
    if R == 0:
        same(col[:, 1], torch.full((4,), N * (N + 1) / 2), "reduce into a column")
    out = torch.zeros(N, 2).t()  # (2, N)
    dist.all_gather_into_tensor(out, torch.full((2,), float(R)))
    same(out.reshape(-1), torch.arange(N).float().repeat_interleave(2), "all_gather_into_tensor into a transpose")
    ag = [torch.zeros(2, 2).t() for _ in range(N)]
    dist.all_gather(ag, (torch.arange(4.0).reshape(2, 2) + R).t())
    for a in range(N):
        same(ag[a], (torch.arange(4.0).reshape(2, 2) + a).t(), "all_gather of a transpose from %d" % a)
    rs = torch.zeros(2, 3)
    dist.reduce_scatter(rs[:, 0], [torch.full((2,), float(R + b)) for b in range(N)])
    same(rs[:, 0], torch.full((2,), float(N * (N - 1) / 2 + N * R)), "reduce_scatter into a column")
    got = torch.zeros(2, 2)
    dist.scatter(got.t(), scatter_list=[torch.full((2, 2), float(b)) for b in range(N)] if R == 0 else None, src=0)
    same(got, torch.full((2, 2), float(R)), "scatter into a transpose")
    a2a = torch.zeros(2, N).t()  # (N, 2)
    dist.all_to_all_single(a2a, (torch.arange(2 * N).float().reshape(2, N) + 100 * R).t())
    same(a2a, torch.tensor([[100.0 * a + R, 100.0 * a + N + R] for a in range(N)]), "all_to_all_single of transposes")


def nested_future():
    """A future's callback that waits for another operation's future, as
    PowerSGD's hook does: callbacks ran on the thread that completes the
    group's operations, which then waited for itself, forever (Gloo runs
    it). faulthandler ends a hang here within a minute."""
    def then(fut):
        return dist.all_reduce(fut.value()[0] * 10, async_op=True).get_future().wait()[0]
    faulthandler.dump_traceback_later(60, exit=True)
    got = dist.all_reduce(torch.ones(2), async_op=True).get_future().then(then).wait()
    same(got, torch.full((2,), 10.0 * N * N), "a callback waiting for another all_reduce")
    # Two futures completed back to back, the first's callback waiting for
    # the second: the second needs a thread of its own.
    for i in range(20):
        first = dist.all_reduce(torch.ones(1), async_op=True)
        second = dist.all_reduce(torch.ones(2), async_op=True)
        fut2 = second.get_future()
        got = first.get_future().then(lambda f: fut2.wait()[0] + f.value()[0]).wait()
        same(got, torch.full((2,), 2.0 * N), "a callback waiting for a future completed right after its own")
    w = dist.all_reduce(torch.ones(2), async_op=True)
    fut = w.get_future()
    w.wait()
    expect(fut.done() and fut.value()[0].tolist() == [float(N)] * 2, "the future after Work.wait")
    faulthandler.cancel_dump_traceback_later()


def async_barrier():
    """dist.barrier(async_op=True), then another collective before its
    wait, as Gloo allows: the barrier ran later, from the thread that
    completes operations, and met the other ranks' all_reduce ("ranks
    disagree"). It must also complete after the operations before it."""
    for i in range(20):
        t = torch.ones(4096)
        first = dist.all_reduce(t, async_op=True)
        b = dist.barrier(async_op=True)
        if R == 0:
            time.sleep(0.002)
        t2 = torch.full((3,), float(R))
        dist.all_reduce(t2)
        b.wait()
        expect(first.is_completed(), "a barrier completed before the all_reduce started before it")
        first.wait()
        same(t, torch.full((4096,), float(N)), "all_reduce before an async barrier")
        same(t2, torch.full((3,), N * (N - 1) / 2), "all_reduce after an async barrier")


def exchange():
    """The torch idiom for an exchange: isend to both neighbours, irecv
    from both, then wait (or batch_isend_irecv, or poll is_completed, or
    wait for the futures), with messages too large for gorun to buffer
    (4 MiB). The backend used to wait for each isend as soon as it was
    started, which ran it alone, before the irecvs: every rank's send
    waited for a receive queued behind it until GORUN_TIMEOUT."""
    n = 1 << 20
    nxt, prv = (R + 1) % N, (R - 1) % N
    for way in ("wait", "batch_isend_irecv", "is_completed", "get_future"):
        to_n, to_p = torch.full((n,), float(R + 1)), torch.full((n,), -float(R + 1))
        from_p, from_n = torch.zeros(n), torch.zeros(n)
        if way == "batch_isend_irecv":
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, to_n, nxt, tag=11),
                                           dist.P2POp(dist.isend, to_p, prv, tag=12),
                                           dist.P2POp(dist.irecv, from_p, prv, tag=11),
                                           dist.P2POp(dist.irecv, from_n, nxt, tag=12)])
        else:
            reqs = [dist.isend(to_n, nxt, tag=11), dist.isend(to_p, prv, tag=12),
                    dist.irecv(from_p, prv, tag=11), dist.irecv(from_n, nxt, tag=12)]
        if way == "is_completed":
            while not all(q.is_completed() for q in reqs):
                time.sleep(0.001)
        elif way == "get_future":
            torch.futures.wait_all([q.get_future() for q in reqs])
        else:
            for q in reqs:
                q.wait()
        expect(bool((from_p == prv + 1).all()) and bool((from_n == -(nxt + 1)).all()),
               "4 MiB exchange (%s): got %g from %d and %g from %d" % (way, from_p[0], prv, from_n[0], nxt))


def subgroups():
    """dist.new_group over every rank, in any order, is the world. Over
    fewer ranks, each group's members alone make its communicator, while
    the other ranks return NON_GROUP_MEMBER from new_group at once: with 3
    ranks or more, new_group([0, 2]) and new_group([1]); with 2,
    new_group([1]) and new_group([0]). Each member checks its group rank,
    all_reduce, broadcast from either end (src is a global rank, which
    torch maps to the group's) and all_gather, in group-rank order, against
    its members' global ranks; the two groups' ops run at once. A member
    used to raise "subgroups are not supported" (c75962d)."""
    for ranks in (None, list(range(N))[::-1]):
        g = dist.new_group(ranks)
        t = torch.tensor([float(R)])
        dist.all_reduce(t, group=g)
        same(t, torch.tensor([N * (N - 1) / 2]), "all_reduce on new_group(%s)" % ranks)
    specs = [[0, 2], [1]] if N >= 3 else [[1], [0]]
    # Every rank calls new_group for each group, in the same order.
    groups = [(ranks, dist.new_group(ranks, timeout=timedelta(seconds=60))) for ranks in specs]
    for ranks, g in groups:
        if R not in ranks:
            expect(g == dist.GroupMember.NON_GROUP_MEMBER, "new_group(%s) on a non-member returned %r" % (ranks, g))
            continue
        what = "new_group(%s)" % ranks
        expect(dist.get_rank(g) == ranks.index(R) and dist.get_world_size(g) == len(ranks),
               "%s: rank %d of %d, want %d of %d" % (what, dist.get_rank(g), dist.get_world_size(g), ranks.index(R), len(ranks)))
        t = torch.tensor([R + 1, -10 * (R + 1)], dtype=torch.int64)
        dist.all_reduce(t, group=g)
        want = sum(r + 1 for r in ranks)
        same(t, torch.tensor([want, -10 * want]), "all_reduce on " + what)
        for src in (ranks[-1], ranks[0]):
            t = torch.tensor([100.0 + R, 0.5]) if R == src else torch.zeros(2)
            dist.broadcast(t, src=src, group=g)
            same(t, torch.tensor([100.0 + src, 0.5]), "broadcast from global rank %d on %s" % (src, what))
        outs = [torch.zeros(3, dtype=torch.int32) for _ in ranks]
        dist.all_gather(outs, torch.tensor([R, 2 * R, -R], dtype=torch.int32), group=g)
        same(torch.stack(outs), torch.tensor([[r, 2 * r, -r] for r in ranks], dtype=torch.int32), "all_gather on " + what)
        dist.barrier(group=g)
    t = torch.ones(1)
    dist.all_reduce(t)
    same(t, torch.tensor([float(N)]), "all_reduce after the subgroups")
    for ranks, g in groups:
        if R in ranks:
            dist.destroy_process_group(g)  # finalizes the group's communicator


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def batches(steps):
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(6 * N, 8, generator=g), torch.randn(6 * N, 4, generator=g)) for _ in range(steps)]


def train(pg, zero, powersgd=False, **ddp_kw):
    """DDP on process group pg (optionally with ZeroRedundancyOptimizer,
    or PowerSGD's comm hook from its third step); returns the final
    parameters."""
    net = DDP(model(42), process_group=pg, **ddp_kw)
    if powersgd:
        state = powerSGD_hook.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=2)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    if zero:
        opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.Adam, process_group=pg, lr=0.01)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x[R * 6:(R + 1) * 6]), y[R * 6:(R + 1) * 6])
        loss.backward()
        opt.step()
    if zero:
        opt.consolidate_state_dict(to=0)  # gathers every shard's state through the group
        if R == 0:
            expect(len(opt.state_dict()["state"]) == len(list(net.parameters())), "consolidated state")
    return [p.detach().clone() for p in net.parameters()]


def compare_with_gloo(gloo):
    for name, zero, kw in [("ZeroRedundancyOptimizer", True, {}),
                           ("DDP gradient_as_bucket_view+static_graph", False,
                            {"gradient_as_bucket_view": True, "static_graph": True}),
                           # Its hook waits inside a future's callback for
                           # another all_reduce: it used to hang.
                           ("DDP PowerSGD hook", False, {"powersgd": True})]:
        mine = train(None, zero, **kw)
        ref = train(gloo, zero, **kw)
        for i, (a, b) in enumerate(zip(mine, ref)):
            same(a, b, "%s parameter %d vs gloo" % (name, i), rtol=1e-5, atol=1e-6)


def pipeline():
    """Model parallelism: rank r holds stage r; activations go forward and
    gradients back with send/recv, two micro-batches in flight (tags tell
    them apart). The result must equal one process running all stages."""
    torch.manual_seed(7)
    stages = [torch.nn.Linear(4, 4) for _ in range(N)]
    ref = [torch.nn.Linear(4, 4) for _ in range(N)]
    for s, r in zip(stages, ref):
        r.load_state_dict(s.state_dict())
    micro = [torch.randn(2, 4, generator=torch.Generator().manual_seed(m)) for m in range(2)]
    mine = stages[R]
    outs = {}
    for m, x in enumerate(micro):  # forward
        inp = x if R == 0 else torch.zeros(2, 4)
        if R > 0:
            dist.recv(inp, R - 1, tag=100 + m)
        inp.requires_grad_(R > 0)
        out = torch.tanh(mine(inp))
        outs[m] = (inp, out)
        if R < N - 1:
            dist.send(out.detach(), R + 1, tag=100 + m)
    for m in reversed(range(2)):  # backward
        inp, out = outs[m]
        if R == N - 1:
            out.sum().backward()
        else:
            g = torch.zeros(2, 4)
            dist.recv(g, R + 1, tag=200 + m)
            out.backward(g)
        if R > 0:
            dist.send(inp.grad, R - 1, tag=200 + m)
    for m, x in enumerate(micro):  # the single-process reference
        h = x
        for lin in ref:
            h = torch.tanh(lin(h))
        h.sum().backward()
    same(mine.weight.grad, ref[R].weight.grad, "pipeline weight grad", rtol=1e-5, atol=1e-7)
    same(mine.bias.grad, ref[R].bias.grad, "pipeline bias grad", rtol=1e-5, atol=1e-7)


def main():
    global R, N
    dist.init_process_group("gorun")
    R, N = dist.get_rank(), dist.get_world_size()
    expect(dist.get_backend() == "gorun", "backend %s" % dist.get_backend())
    ops()
    exchange()
    subgroups()
    gloo = dist.new_group(backend="gloo")
    compare_with_gloo(gloo)
    pipeline()
    dist.barrier()
    print("torch_ops_check: rank %d ok" % R, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
