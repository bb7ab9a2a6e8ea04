"""Run under `gorun -np 3 /usr/bin/python3 python/tests/torch_wait_check.py`:
Work.wait(timeout) on backend "gorun". A wait that the operation beats
returns True; one it does not beat raises RuntimeError at its timeout,
and, since gorun cannot cancel an operation in flight, aborts the group's
communicator: on the peer, each operation rank 0 had started returns
(completing with the right sum if rank 0's part reached it before the
abort notice, else failing naming rank 0), and every later call on the
group fails rather than hangs, while the other groups go on. Rank 1
joins the operations only after rank 0's wait has timed out (told
through torch's store), so the timeout does not depend on timing. Then
a group's own timeout (new_group's timeout=, as init_process_group's)
bounds rank 0's blocking all_reduce alike. Prints
"torch_wait_check: rank R ok"."""
import os
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")


def main():
    dist.init_process_group("gorun")
    r, n = dist.get_rank(), dist.get_world_size()

    def expect(cond, msg):
        if not cond:
            raise SystemExit("torch_wait_check: rank %d: %s" % (r, msg))

    def matching_call(group, what):
        # Rank 1's call that matches one rank 0 started before it aborted
        # the group: rank 0's part may already be here, ahead of its abort
        # notice (which comes first is timing: CI, 2026-12-03), so the
        # call completes with the right sum or fails naming rank 0.
        x = torch.ones(4)
        try:
            dist.all_reduce(x, group=group)
            expect(torch.all(x == 2).item(), "%s completed wrong: %s" % (what, x))
        except RuntimeError as e:
            expect("abort" in str(e) and "rank 0" in str(e), "%s: peer's message: %s" % (what, e))
            expect("gorun: gorun" not in str(e), "%s: peer's message says gorun twice: %s" % (what, e))

    t = torch.ones(4)
    w = dist.all_reduce(t, async_op=True)
    expect(w.wait(timeout=timedelta(minutes=2)) is True and torch.all(t == n).item(), "bounded wait: %s" % t)

    store = dist.distributed_c10d._get_default_store()
    pair = dist.new_group([0, 1])
    if r == 0:
        # The group's completer thread is busy with first (which rank 1
        # has not started) until rank 1 is told, so it cannot have taken
        # second: wait() finds second unclaimed, as a caller that waits
        # before the completer gets there does (the case that used to
        # ignore its timeout and wait for gorun's own).
        first = dist.all_reduce(torch.ones(4), group=pair, async_op=True)
        second = dist.all_reduce(torch.ones(4), group=pair, async_op=True)
        try:
            second.wait(timeout=timedelta(milliseconds=300))
            expect(False, "wait(300 ms) returned, but rank 1 had not started its all_reduce")
        except RuntimeError as e:
            expect("300 ms" in str(e) and "abort" in str(e), "timeout message: %s" % e)
        try:
            first.wait()
            expect(False, "the all_reduce in flight before the abort succeeded")
        except RuntimeError as e:
            expect("abort" in str(e), "in-flight all_reduce's message: %s" % e)
        store.set("timed_out", "1")
    elif r == 1:
        store.get("timed_out")
        # Rank 0 started two all_reduces on the pair before it aborted
        # it; the call after the two that match them fails.
        for which in ("first", "second"):
            matching_call(pair, "the %s all_reduce matching rank 0's" % which)
    if r < 2:
        try:
            dist.all_reduce(torch.ones(4), group=pair)
            expect(False, "an all_reduce on the aborted group succeeded")
        except RuntimeError as e:
            expect("abort" in str(e), "later call's message: %s" % e)

    # A group's timeout (new_group's, as init_process_group's timeout=)
    # bounds a blocking call, as with Gloo: it used to wait for
    # GORUN_TIMEOUT (120 s in the test), ignoring it.
    timed = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    if r == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4), group=timed)
            expect(False, "a blocking all_reduce that rank 1 never joined returned")
        except RuntimeError as e:
            took = time.monotonic() - t0
            expect("timed out after 2000 ms" in str(e) and "abort" in str(e), "group timeout's message: %s" % e)
            expect(took < 30, "the group's 2 s timeout took %.1f s" % took)
        store.set("group_timed_out", "1")
    elif r == 1:
        store.get("group_timed_out")
        # As above: the call matching rank 0's timed-out one may complete;
        # the next one fails.
        matching_call(timed, "the all_reduce matching rank 0's timed-out one")
        try:
            dist.all_reduce(torch.ones(4), group=timed)
            expect(False, "rank 1's all_reduce on the timed-out group succeeded")
        except RuntimeError as e:
            expect("abort" in str(e) and "rank 0" in str(e), "peer's message after the group timeout: %s" % e)
    # A group whose operations finish in time keeps working past its
    # timeout: the watchdog times each operation, not the group.
    dist.barrier()  # new_group's store barrier waits as long as its timeout
    short = dist.new_group(list(range(n)), timeout=timedelta(seconds=5))
    for _ in range(3):
        t = torch.ones(4)
        dist.all_reduce(t, group=short)
        expect(torch.all(t == n).item(), "all_reduce on a group of 5 s timeout: %s" % t)
        time.sleep(2)

    t = torch.ones(4)
    dist.all_reduce(t)  # the job's group is untouched
    expect(torch.all(t == n).item(), "world all_reduce after the pair's abort: %s" % t)
    print("torch_wait_check: rank %d ok" % r, flush=True)


if __name__ == "__main__":
    main()
