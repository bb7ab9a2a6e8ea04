"""Run under `gorun -np 3 /usr/bin/python3 python/tests/torch_exit_daemon_check.py`:
daemon threads still calling process groups on backend "gorun" while the
interpreter exits, which ends such threads when they take the GIL back.

Every rank runs a daemon thread that calls all_reduce on the default
group in a loop, again after any error. Ranks 0 and 1 run another on a
group of the two, and rank 0 a third, blocked in an all_reduce on a
group of the two that rank 1 never starts. Ranks 0 and 1 also run two
daemons that wait in torch's own waits rather than the backend's calls
(an async all_reduce's Work.wait, and torch.futures.wait_all on its
future, each on a group of the two), and every rank one that calls
gorun's own Python API (gorun.allreduce_ on a numpy array, over ctypes)
on a gorun.Group of the three. Ranks 0 and 1 end their
script while the daemons are in their calls; rank 2's main thread waits
until its daemon's all_reduce fails because they left, and checks that
the error names rank 0 or 1. A daemon thread returning from (or calling)
the backend as the interpreter finalized aborted its process
("terminate called without an active exception"; the job fails "rank R
was killed by signal 6"); now each waits in the backend until the
process ends, and every rank exits 0.

Prints "torch_exit_daemon_check: rank R ok" as its script ends."""
import os
import re
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import numpy  # noqa: E402

import gorun  # noqa: E402
import gorun.torch_backend  # noqa: E402,F401  (registers "gorun")

ROUNDS = 200  # all_reduces each daemon of ranks 0 and 1 makes before their scripts end


def main():
    dist.init_process_group("gorun")
    r = dist.get_rank()
    pair = dist.new_group([0, 1])
    stuck = dist.new_group([0, 1])
    waits = dist.new_group([0, 1])
    futures = dist.new_group([0, 1])
    own = gorun.create_group([0, 1, 2])  # gorun's own API, beside torch's
    rounds = {}  # daemon -> all_reduces done
    errors = []  # the default group's daemon's errors, in order
    started = threading.Event()

    def loop(name, group):
        t = torch.ones(1 << 12)
        rounds[name] = 0
        while True:
            try:
                dist.all_reduce(t, group=group)
                rounds[name] += 1
            except RuntimeError as e:
                if group is None and len(errors) < 10:
                    errors.append(str(e))

    def waiting(name, group):
        # The wait is torch's (Work.wait, or wait_all on the Work's
        # future), not a call into the backend's collective.
        t = torch.ones(1 << 10)
        rounds[name] = 0
        while True:
            try:
                w = dist.all_reduce(t, group=group, async_op=True)
                if name == "waits":
                    w.wait()
                else:
                    torch.futures.wait_all([w.get_future()])
                rounds[name] += 1
            except RuntimeError:
                pass

    def numpy_loop():
        a = numpy.ones(1 << 10, dtype=numpy.float32)
        rounds["own"] = 0
        while True:
            try:
                own.allreduce_(a)
                rounds["own"] += 1
            except gorun.GorunError:
                pass

    def blocked():
        started.set()
        try:
            dist.all_reduce(torch.ones(4), group=stuck)  # rank 1 never starts it
        except RuntimeError:
            pass
        while True:  # and keep calling, as a retry loop would
            try:
                dist.all_reduce(torch.ones(4), group=stuck)
            except RuntimeError:
                pass

    daemons = [threading.Thread(target=loop, args=("default", None), daemon=True),
               threading.Thread(target=numpy_loop, daemon=True)]
    if r < 2:
        daemons.append(threading.Thread(target=loop, args=("pair", pair), daemon=True))
        daemons.append(threading.Thread(target=waiting, args=("waits", waits), daemon=True))
        daemons.append(threading.Thread(target=waiting, args=("futures", futures), daemon=True))
    if r == 0:
        daemons.append(threading.Thread(target=blocked, daemon=True))
    for d in daemons:
        d.start()
    if r < 2:
        busy = ("default", "pair", "waits", "futures", "own")
        while min(rounds.get(name, 0) for name in busy) < ROUNDS or (r == 0 and not started.is_set()):
            threading.Event().wait(0.01)
    else:
        while not errors:
            threading.Event().wait(0.01)
        if not re.search(r"rank [01]: peer (closed the communicator|failed)", errors[0]):
            raise SystemExit("torch_exit_daemon_check: rank 2: the all_reduce failed without naming rank 0 or 1: %s"
                             % errors[0])
    print("torch_exit_daemon_check: rank %d ok (%s)" % (r, errors[0] if errors else "leaving"), flush=True)


if __name__ == "__main__":
    main()
