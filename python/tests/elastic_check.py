"""Run under gorun -np 4 --elastic --max-restarts 1: rank 2 kills itself
once mid-run; the survivors shrink and go on, gorun restarts it, it rejoins
at a commit and receives the state. Every rank ends at full size with the
same weights, the ones a run without a failure computes.

With --no-wait the survivors do not wait for it: they finish at 3 ranks,
and a restart slower than the rest of the run finds the job gone
(gorun.ERR_JOB_GONE), which this script takes as done."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import gorun  # noqa: E402
from gorun import elastic  # noqa: E402

STEPS, KILL_AT = 40, 10
NO_WAIT = "--no-wait" in sys.argv[1:]

try:
    gorun.init()
except gorun.GorunError as e:
    if e.status == gorun.ERR_JOB_GONE:  # restarted after the others finished
        print("rank restarted after the job ended:", e, flush=True)
        sys.exit(0)
    raise
restarted = bool(os.environ.get("GORUN_RESTART"))
state = elastic.State(w=np.zeros(8), step=0, log=[])
sizes = []


@elastic.run
def train(state):
    # Until STEPS steps are done and the restarted rank is back (bounded).
    while (state.step < STEPS or gorun.size() < 4 and not NO_WAIT) and state.step < 50 * STEPS:
        g = np.full(8, float(state.step + 1))
        gorun.allreduce_(g, "avg")          # the same on every rank: the mean is too
        state.w += g
        state.step += 1
        if state.step == KILL_AT and gorun.rank() == 2 and not restarted:
            os.kill(os.getpid(), signal.SIGKILL)
        sizes.append(gorun.size())
        state.commit()
        time.sleep(0.02)


train(state)
# A restarted rank can rejoin after the others' last step: it receives the
# final state and runs no step itself, so only the survivors check sizes.
n = state.step
want = n * (n + 1) / 2
full = 3 if NO_WAIT else 4
ok = gorun.size() == full and np.all(state.w == want) and (restarted or min(sizes) == 3)
print("elastic_check: rank %d size %d steps %d w %s restarted %s smallest %s %s" % (
    gorun.rank(), gorun.size(), n, state.w[0], restarted, min(sizes) if sizes else None,
    "ok" if ok else "WRONG (want w %s)" % want), flush=True)
gorun.barrier()
gorun.finalize()
sys.exit(0 if ok else 1)
