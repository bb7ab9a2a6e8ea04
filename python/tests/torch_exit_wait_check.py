"""Run under `gorun -np 3 /usr/bin/python3 python/tests/torch_exit_wait_check.py`
with GORUN_TIMEOUT=60s: scripts that end without destroying their
process groups while an operation that a peer never starts is left. At
exit each group waits for its operations left, as a destroy does (a peer
that is still working may yet start it):

  - "crossed": groups A and B, both of ranks 0 and 1; rank 0 leaves an
    all_reduce on A, rank 1 one on B. Each rank's exit waited for its
    own until GORUN_TIMEOUT; now a rank finalizes a group's communicator
    once its operations are done, groups of their own first, in the
    order they were made, so rank 1 lets A go and rank 0's fails at once
    naming rank 1, then rank 0 lets B go, and rank 1's fails naming
    rank 0.
  - "group timeout": group C of ranks 0 and 2, made with timeout=5s;
    rank 0 leaves an all_reduce on it while rank 2 is still running and
    never starts one. Once the group was stopped it was bounded by
    GORUN_TIMEOUT only (its watchdog stopped with it); now by the group's
    timeout, as everywhere else. Rank 2 ends once rank 0's callback ran.

Each operation's then() callback prints "torch_exit_wait_check: rank R:
CASE: ERROR" (or "completed", which is wrong here)."""
import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

_keep = []  # works and futures, alive until the interpreter finalizes


def main():
    dist.init_process_group("gorun")
    r = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    # C first: each rank stops its groups in the order they were made, and
    # a group's watchdog not yet stopped bounded C's operation all along.
    c = dist.new_group([0, 2], timeout=datetime.timedelta(seconds=5))
    a = dist.new_group([0, 1])
    b = dist.new_group([0, 1])

    def leave(case, group, then=None):
        def cb(f):
            try:
                f.value()
                said = "completed"
            except Exception as e:  # noqa: BLE001  (the error is what is checked)
                said = str(e)
            sys.stdout.write("torch_exit_wait_check: rank %d: %s: %s\n" % (r, case, said))
            sys.stdout.flush()
            if then:
                then()

        w = dist.all_reduce(torch.ones(4), group=group, async_op=True)
        _keep.append((w, w.get_future().then(cb)))

    if r == 0:
        leave("crossed", a)
        leave("group timeout", c, lambda: store.set("torch_exit_wait_check/c", "done"))
    elif r == 1:
        leave("crossed", b)
    dist.barrier()  # every operation left has started
    if r == 2:
        store.wait(["torch_exit_wait_check/c"], datetime.timedelta(seconds=120))
    print("torch_exit_wait_check: rank %d: ends" % r, flush=True)


if __name__ == "__main__":
    main()
