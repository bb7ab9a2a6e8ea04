"""Run under `gorun -np 4 /usr/bin/python3 python/tests/torch_refuse_check.py`,
with GORUN_TIMEOUT far beyond LIMIT: in each case one rank passes a
torch.distributed call on backend "gorun" an argument the backend refuses
(a send's tensor not contiguous, a recv from any source, a bitwise op on floats, a dtype gorun lacks, an
output of another dtype than its input, split sizes that do not fit, a
scatter list of the wrong length) while the others pass good ones. The
refusing rank raises RuntimeError saying what it refused; every other
rank raises RuntimeError naming it, in its words, within LIMIT seconds,
where they used to wait for it until GORUN_TIMEOUT. A refused output is
left untouched. Cases run on a new group of ranks 0,
1 and 2 (rank 3 sits out), which the refusal aborts, so each has a group
of its own; one case has every member refuse alike, and the last runs on
the default group, the job's communicator, on every rank. Prints
"torch_refuse_check: rank R ok"."""
import faulthandler
import os
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

LIMIT = 60  # seconds; GORUN_TIMEOUT is 10 minutes
MEMBERS = [0, 1, 2]  # group ranks are their global ranks
R = 0
CASES = 0  # cases run, numbering their keys in torch's store


def expect(cond, msg):
    if not cond:
        raise SystemExit("torch_refuse_check: rank %d: %s" % (R, msg))


def case(what, bad, words, call, world=False):
    """call(g) on a new group g of MEMBERS (on the default group, every
    rank, if world), where rank bad alone passes an argument refused with
    an error saying words (every member does, if bad is None). Returns the
    error raised here, None on a rank outside g."""
    global CASES
    CASES += 1
    g = None if world else dist.new_group(MEMBERS)  # every rank makes it; others get NON_GROUP_MEMBER
    if not world and R not in MEMBERS:
        dist.barrier()
        return None
    dist.barrier(group=g)  # every member has made g: a refusal on it cannot fail another's making
    # A call that waits past LIMIT prints where it waits and exits 1.
    faulthandler.dump_traceback_later(LIMIT, exit=True)
    t0 = time.monotonic()
    try:
        call(g)
        err = None
    except RuntimeError as e:
        err = e
    took = time.monotonic() - t0
    faulthandler.cancel_dump_traceback_later()
    expect(err is not None, "%s: no error" % what)
    msg = str(err)
    if bad is None or R == bad:
        expect(all(w in msg for w in words), "%s: the refusing rank's error %r does not say %s" % (what, msg, words))
    else:
        # gorun passes the refusing rank's words on to the others.
        expect("rank %d" % bad in msg and all(w in msg for w in words),
               "%s: error %r does not name rank %d and say %s" % (what, msg, bad, words))
    expect(took < LIMIT, "%s: failed after %.1f s" % (what, took))
    print("torch_refuse_check: rank %d: %s (%.2f s): %s" % (R, what, took, msg.splitlines()[0]), flush=True)
    # No member calls on g again until every member's call has failed: a
    # later call of the refusing rank would meet the others' call in
    # gorun, which fails them for the mismatch, and hide a refusal the
    # others never heard of. torch's store is the side channel.
    store = dist.distributed_c10d._get_default_store()
    store.set("refuse-%d-%d" % (CASES, R), "failed")
    store.wait(["refuse-%d-%d" % (CASES, r) for r in (range(dist.get_world_size()) if world else MEMBERS)],
               timedelta(seconds=LIMIT))
    try:
        dist.all_reduce(torch.ones(1), group=g)
        expect(False, "%s: the group still worked after the refusal" % what)
    except RuntimeError:
        pass
    if not world:
        dist.destroy_process_group(g)  # finalizes the group's communicator
        dist.barrier()  # the default group goes on
    return err


def mine(good, bad_rank, refused):
    """refused on rank bad_rank, good elsewhere."""
    return refused if R == bad_rank else good


def main():
    global R
    dist.init_process_group("gorun")
    R, n = dist.get_rank(), dist.get_world_size()
    expect(n == 4, "needs 4 ranks, has %d" % n)
    m = len(MEMBERS)

    def send_strided(g):
        # A collective takes a strided tensor (torch_ops_check.py), a send
        # or recv does not, as with Gloo.
        if R == 0:
            dist.send(torch.ones(4, 4).t(), 1, group=g)
        elif R == 1:
            dist.recv(torch.zeros(4, 4), 0, group=g)
        else:
            dist.all_reduce(torch.ones(4), group=g)
    case("send of rank 0's tensor not contiguous", 0, ["contiguous"], send_strided)

    def recv_any(g):
        # dist.recv with no src used to fail rank 1 alone ("does not support
        # recvAnysource"), and rank 0's message stayed queued.
        if R == 0:
            dist.send(torch.ones(4), 1, group=g)  # may be done (buffered) before rank 1 refuses
            dist.all_reduce(torch.ones(4), group=g)
        elif R == 1:
            dist.recv(torch.zeros(4), group=g)
        else:
            dist.all_reduce(torch.ones(4), group=g)
    case("recv on rank 1 from any source", 1, ["any source"], recv_any)
    case("all_reduce, rank 1's BAND on floats", 1, ["integer"],
         lambda g: dist.all_reduce(torch.ones(4), op=mine(dist.ReduceOp.MAX, 1, dist.ReduceOp.BAND), group=g))

    def send_complex(g):
        # torch passes a send's complex tensor on as it is (an all_reduce's
        # it views as floats): gorun has no complex type. Rank 2 takes no
        # part in the exchange; its all_reduce fails all the same.
        if R == 0:
            dist.send(torch.ones(4, dtype=torch.complex64), 1, group=g)
        elif R == 1:
            dist.recv(torch.zeros(4), 0, group=g)
        else:
            dist.all_reduce(torch.ones(4), group=g)
    case("send of rank 0's complex tensor to rank 1", 0, ["unsupported dtype", "ComplexFloat"], send_complex)

    # A float16 output for a float32 input used to be written with the
    # input's element size, past the output's end (the canary after it).
    big = torch.zeros(4 * m * 256, dtype=torch.float16)
    out, canary = big[:m * 256], big[m * 256:]
    canary.fill_(7)
    case("all_gather_into_tensor, rank 2's float16 output for float32", 2, ["dtype", "Half", "Float"],
         lambda g: dist.all_gather_into_tensor(mine(torch.zeros(m * 256), 2, out), torch.ones(256), group=g))
    case("reduce_scatter_tensor, every member's float16 output for float32", None, ["dtype", "Half", "Float"],
         lambda g: dist.reduce_scatter_tensor(out[:256], torch.ones(256 * m), group=g))
    expect(bool((canary == 7).all()) and bool((out == 0).all()), "a refused call wrote to its output or past it")

    src, dst = torch.ones(2 * m, 2), torch.zeros(2 * m, 2)
    case("all_to_all_single, rank 1's split sizes add up to more rows", 1, ["split sizes add up to"],
         lambda g: dist.all_to_all_single(dst, src, mine([2] * m, 1, [4] * m), [2] * m, group=g))
    case("all_to_all_single, rank 2's split sizes too few", 2, ["one per rank"],
         lambda g: dist.all_to_all_single(dst, src, [2] * m, mine([2] * m, 2, [2]), group=g))
    case("scatter from rank 0, whose list is one tensor short", 0, ["scatter needs one list of %d" % m],
         lambda g: dist.scatter(torch.zeros(2), [torch.ones(2)] * (m - 1) if R == 0 else None, src=0, group=g))
    case("all_gather_into_tensor on the default group, rank 3's int8 output for float64", 3, ["dtype"],
         lambda g: dist.all_gather_into_tensor(mine(torch.zeros(n * 8, dtype=torch.float64), 3,
                                                    torch.zeros(n * 8, dtype=torch.int8)),
                                               torch.ones(8, dtype=torch.float64)), world=True)
    print("torch_refuse_check: rank %d ok" % R, flush=True)


if __name__ == "__main__":
    main()
