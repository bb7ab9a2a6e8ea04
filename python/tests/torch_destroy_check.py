"""Run under `gorun -np 2 /usr/bin/python3 python/tests/torch_destroy_check.py`:
a process group on backend "gorun" destroyed while a future of one of its
operations still has a Python then() callback to run. The group's
destructor waits for its completer threads, and a completer runs such a
callback, which takes the GIL: a destructor that waited holding the GIL
(Python drops the last reference to the group with it held) waited
forever. Each case checks that the destroy returns, with the callback
run and its future holding the reduced tensor, as with Gloo:
  - the callback has started and sleeps (releasing the GIL) when a
    subgroup is destroyed and its last reference dropped;
  - the operation itself is still running: rank 1 joins it only once
    rank 0 is about to destroy its subgroup;
  - the callback holds the group's last reference, so the group is
    destroyed on the completer thread that ran it, which cannot join
    itself;
  - as the first, on the default group (destroy_process_group()).
A destroy that hangs fails the check at its minute with every thread's
Python stack (faulthandler). Prints "torch_destroy_check: rank R ok"."""
import faulthandler
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

SLEEP = 0.5  # how long a slow callback sleeps, without the GIL


def main():
    dist.init_process_group("gorun")
    r, n = dist.get_rank(), dist.get_world_size()
    faulthandler.dump_traceback_later(60, exit=True)

    def expect(cond, msg):
        if not cond:
            raise SystemExit("torch_destroy_check: rank %d: %s" % (r, msg))

    def pending(group):
        """An all_reduce on group whose future's then() callback, once it
        runs, sleeps SLEEP s; the event is set when it starts."""
        started = threading.Event()

        def cb(f):
            started.set()
            time.sleep(SLEEP)  # the GIL is free meanwhile; it is taken back to return
            return f.value()[0] * 2

        w = dist.all_reduce(torch.ones(4), group=group, async_op=True)
        return w, w.get_future().then(cb), started

    def returned(fut, what):
        # The destroy waited for the completers, which ran the callback.
        expect(fut.done(), "%s: the then() callback's future is not done after the destroy" % what)
        got = fut.wait()
        expect(torch.all(got == 2 * n).item(), "%s: the callback returned %s" % (what, got))

    # A callback that has started, asleep without the GIL, when the
    # subgroup goes: the last reference is the script's.
    sub = dist.new_group(list(range(n)))
    w, fut, started = pending(sub)
    expect(started.wait(60), "slow callback: it never started")
    t0 = time.monotonic()
    dist.destroy_process_group(sub)
    del sub
    took = time.monotonic() - t0
    returned(fut, "slow callback")
    print("torch_destroy_check: rank %d: subgroup destroyed in %.3f s with a callback pending" % (r, took), flush=True)

    # The operation still in flight: rank 1 starts its side only once
    # rank 0 is about to destroy the subgroup (told through the default
    # group's store, which this destroy keeps).
    store = dist.distributed_c10d._get_default_store()
    sub = dist.new_group(list(range(n)))
    if r == 0:
        w, fut, _ = pending(sub)
        store.set("torch_destroy_check/destroying", "1")
    else:
        store.get("torch_destroy_check/destroying")
        w, fut, _ = pending(sub)
    dist.destroy_process_group(sub)
    del sub
    returned(fut, "operation in flight")

    # The callback holds the group's last reference (a closure): the
    # destructor runs on the completer thread that ran it, which cannot
    # join itself (it aborted the process: "Resource deadlock avoided", as
    # Gloo's does). Rank 0's callback waits until the script has let the
    # group go; rank 1 joins the all_reduce once that callback is attached
    # (attached to a future already done, it would run at once, here).
    sub = dist.new_group(list(range(n)))
    if r == 0:
        dropped = threading.Event()

        def holding(g):
            def cb(f):
                dropped.wait(60)
                return f.value()[0] * g.size()
            return cb

        w = dist.all_reduce(torch.ones(4), group=sub, async_op=True)
        fut = w.get_future().then(holding(sub))
        store.set("torch_destroy_check/attached", "1")
        dist.destroy_process_group(sub)
        del sub
        dropped.set()
        got = fut.wait()
        expect(torch.all(got == n * n).item(), "callback holding the group: it returned %s" % got)
    else:
        store.get("torch_destroy_check/attached")
        dist.all_reduce(torch.ones(4), group=sub)
        dist.destroy_process_group(sub)
        del sub

    # The default group, as the first case.
    w, fut, started = pending(None)
    expect(started.wait(60), "slow callback on the default group: it never started")
    dist.destroy_process_group()
    returned(fut, "default group")
    faulthandler.cancel_dump_traceback_later()
    print("torch_destroy_check: rank %d ok" % r, flush=True)


if __name__ == "__main__":
    main()
