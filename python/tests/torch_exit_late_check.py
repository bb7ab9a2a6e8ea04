"""Run under `gorun -np 2 /usr/bin/python3 python/tests/torch_exit_late_check.py`:
process groups made by atexit hooks, while the interpreter exits.

  - "after": a hook registered after init_process_group makes a group and
    starts an all_reduce whose future's then() callback sleeps. It runs
    before gorun's own exit hook, which stops every group (their callbacks
    run, their threads end) before the interpreter finalizes. The group's
    making used to take torch_backend's stop hook off the atexit list (a
    hook registered while they run is never run), and the callback, left
    to the interpreter's finalization, crashed the process (SIGSEGV; the
    job fails "rank R was killed by signal 11"). Prints "after: callback
    ok" once it ran with the reduced tensor.
  - "before": a hook registered before init_process_group runs after
    gorun's, which finalized the job's communicator. Its new_group made
    the job again and a group whose threads outlived the stop (SIGSEGV
    too); now it raises RuntimeError saying the interpreter exits, and so
    does an all_reduce on the default group. Prints "before: refused".

Prints "torch_exit_late_check: rank R: CASE: ..." for each."""
import atexit
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

SLEEP = 0.5  # how long the callback sleeps, without the GIL
_keep = []  # the late group's work and future: alive until the interpreter finalizes


def say(r, case, what):
    sys.stdout.write("torch_exit_late_check: rank %d: %s: %s\n" % (r, case, what))
    sys.stdout.flush()


def after():
    r, n = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(list(range(n)))

    def cb(f):
        time.sleep(SLEEP)  # gorun's exit hook waits for it; the interpreter has not finalized
        got = f.value()[0]
        say(r, "after", "callback ok" if torch.all(got == n).item() else "callback got %s" % got)

    w = dist.all_reduce(torch.ones(4), group=g, async_op=True)
    _keep.append((g, w, w.get_future().then(cb)))
    say(r, "after", "started")


def before():
    r = dist.get_rank()
    said = []
    for what, call in (("new_group", lambda: dist.new_group([0, 1])),
                       ("all_reduce", lambda: dist.all_reduce(torch.ones(4)))):
        try:
            call()
            said.append("%s did not raise" % what)
        except RuntimeError as e:
            if "interpreter" not in str(e) or "exit" not in str(e):
                said.append("%s raised, not saying the interpreter exits: %s" % (what, e))
    say(r, "before", "; ".join(said) or "refused")


def main():
    atexit.register(before)
    dist.init_process_group("gorun")
    atexit.register(after)
    say(dist.get_rank(), "main", "ends")


if __name__ == "__main__":
    main()
