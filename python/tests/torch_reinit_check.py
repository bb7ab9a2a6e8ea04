"""Run under `gorun -np 4`: destroy_process_group, then init_process_group
again in the same processes, on backend "gorun".

1. After the default group was aborted (rank 0's Work.wait timed out;
   every rank's next all_reduce fails), with rank 0 destroying its group
   a second after the others: the new group works. The backend used to
   run it on the aborted communicator (it kept the job's communicator in
   a module global), and the others, back before rank 0 had destroyed its
   group, met rank 0's old TCPStore server (torch's env:// reuses
   MASTER_PORT and its keys): "Broken pipe", or a barrier that never
   counted 4.
2. A destroy and init again on every rank at once, the group healthy.
3. store=: a PrefixStore used again without a new prefix fails at once on
   every rank saying why (torch's store-based barrier would wait out its
   timeout: the store holds the first init's keys); with a new prefix,
   as torch supports, the group works.

Prints "torch_reinit_check: rank R ok" from each.
"""
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")


def fail(msg):
    raise SystemExit("torch_reinit_check: rank %d: %s" % (R, msg))


def sums(what):
    t = torch.full((8,), float(R + 1))
    dist.all_reduce(t)
    want = float(N * (N + 1) // 2)
    if not torch.equal(t, torch.full((8,), want)):
        fail("%s: all_reduce gave %s, want %s" % (what, t.tolist(), want))


def aborted():
    """Rank 0's wait times out (the others start theirs only after, told by
    a gloo group), which aborts the group. The others' all_reduce matching
    rank 0's may complete, if rank 0's part reached them before its abort
    notice, or fail; every rank's next all_reduce fails."""
    order = dist.new_group(backend="gloo")
    if R == 0:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        try:
            w.wait(datetime.timedelta(milliseconds=50))
            fail("the wait did not time out")
        except RuntimeError as e:
            if "timed out" not in str(e):
                raise
    dist.barrier(group=order)
    if R != 0:
        t = torch.ones(4)
        try:
            dist.all_reduce(t)
            if not torch.equal(t, torch.full((4,), float(N))):
                fail("all_reduce matching rank 0's timed-out one completed wrong: %s" % t.tolist())
        except RuntimeError as e:
            if "abort" not in str(e):
                fail("all_reduce matching rank 0's timed-out one: %s" % e)
    try:
        dist.all_reduce(torch.ones(4))
        fail("all_reduce on the aborted group succeeded")
    except RuntimeError as e:
        if "abort" not in str(e):
            fail("all_reduce on the aborted group: %s" % e)
    dist.barrier(group=order)
    dist.destroy_process_group(order)


def main():
    global R, N
    R, N = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gorun")
    sums("first group")
    aborted()
    if R == 0:
        # Late on purpose: without destroy's wait for rank 0, the others
        # would be initialising again against rank 0's old store by now.
        time.sleep(1)
    dist.destroy_process_group()
    dist.init_process_group("gorun")
    sums("after the aborted group")

    dist.destroy_process_group()
    dist.init_process_group("gorun")
    sums("after a healthy group")
    dist.destroy_process_group()

    # store=: rank 0 hosts a store of its own on MASTER_PORT, free now.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), N, R == 0,
                          datetime.timedelta(seconds=60))
    dist.init_process_group("gorun", store=dist.PrefixStore("first", store), rank=R, world_size=N)
    sums("store= first prefix")
    dist.destroy_process_group()
    try:
        dist.init_process_group("gorun", store=dist.PrefixStore("first", store), rank=R, world_size=N,
                                timeout=datetime.timedelta(seconds=60))
        fail("init_process_group on a store holding the first init's keys returned")
    except RuntimeError as e:
        if "already holds an earlier init_process_group's keys" not in str(e):
            fail("init_process_group on a used store: %s" % e)
    dist.init_process_group("gorun", store=dist.PrefixStore("second", store), rank=R, world_size=N)
    sums("store= new prefix")
    dist.destroy_process_group()
    print("torch_reinit_check: rank %d ok" % R, flush=True)


if __name__ == "__main__":
    main()
