"""Run under `gorun -np 2 /usr/bin/python3 python/tests/torch_exit_check.py`:
a script that ends without destroying its process groups while futures of
their operations still have then() callbacks to run. Once the interpreter
finalizes, a thread that takes the GIL is ended where it stands, and a
callback ended so crashed the process with SIGSEGV at exit. Each callback
prints "torch_exit_check: rank R: CASE: callback ok" once it has run with
the reduced tensor:
  - "running": a subgroup's callback has started and sleeps (without the
    GIL) when the script ends;
  - "in flight": the default group's all_reduce is still running when
    rank 0's script ends (rank 1 joins it only then), so its callback has
    yet to start, and the job's communicator, which gorun finalizes at
    exit, is still in use."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

SLEEP = 0.5  # how long a callback sleeps, without the GIL


def main():
    dist.init_process_group("gorun")
    r, n = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()

    def pending(what, group):
        """An all_reduce of ones on group, whose future's then() callback
        sleeps SLEEP s and says whether it got n; the event is set when it
        starts."""
        started = threading.Event()

        def cb(f):
            started.set()
            time.sleep(SLEEP)  # the interpreter may be exiting when this takes the GIL back
            try:
                got = f.value()[0]
                said = "callback ok" if torch.all(got == n).item() else "callback got %s" % got
            except Exception as e:  # the operation failed: say how, rather than nothing
                got, said = None, "callback got an error: %s" % e
            sys.stdout.write("torch_exit_check: rank %d: %s: %s\n" % (r, what, said))  # one write: two
            sys.stdout.flush()  # callbacks may print at once
            return got

        w = dist.all_reduce(torch.ones(4), group=group, async_op=True)
        fut = w.get_future().then(cb)
        return w, fut, started

    sub = dist.new_group(list(range(n)))
    keep = [pending("running", sub)]
    if not keep[0][2].wait(60):
        raise SystemExit("torch_exit_check: rank %d: the subgroup's callback never started" % r)
    if r == 0:
        keep.append(pending("in flight", None))
        store.set("torch_exit_check/ending", "1")
    else:
        store.get("torch_exit_check/ending")
        keep.append(pending("in flight", None))
    print("torch_exit_check: rank %d: ending with callbacks to run" % r, flush=True)


if __name__ == "__main__":
    main()
