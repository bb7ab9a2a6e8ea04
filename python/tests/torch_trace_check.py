"""Run under `gorun -np 2 --timeline FILE /usr/bin/python3 python/tests/torch_trace_check.py`:
a few torch.distributed calls on backend "gorun", which the timeline shows
as spans on each rank's "torch" row (python_test.go reads the file).
Prints "torch_trace_check: rank R ok"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import gorun.torch_backend  # noqa: E402,F401

dist.init_process_group("gorun")
r, n = dist.get_rank(), dist.get_world_size()
t = torch.ones(1000)
for _ in range(3):
    dist.all_reduce(t)
dist.broadcast(t, 0)
dist.barrier()
if t[0].item() != n ** 3:
    raise SystemExit("torch_trace_check: rank %d: %g, want %d" % (r, t[0].item(), n ** 3))
dist.destroy_process_group()
print("torch_trace_check: rank %d ok" % r, flush=True)
