"""Data-parallel training of a small PyTorch model on gorun (CPU).

    gorun -np 2 /usr/bin/python3 examples/torch_train.py                 # gorun.DistributedOptimizer
    gorun -np 2 /usr/bin/python3 examples/torch_train.py --mode ddp      # DDP on backend "gorun"
    gorun -np 2 /usr/bin/python3 examples/torch_train.py --mode ddp --backend gloo
    /usr/bin/python3 examples/torch_train.py --mode single --ranks 2     # one process, combined batch
    gorun -np 3 /usr/bin/python3 examples/torch_train.py --group 0,2     # ranks 0, 2 in a group; 1 alone

Every rank builds the same synthetic data set and model from fixed seeds.
At step s the job's global batch is samples [s*B*R, (s+1)*B*R); rank r
trains on the r-th block of B of them, so averaged gradients equal the
gradient of one process training on the whole global batch (--mode single).
--out writes the final parameters (rank 0) for comparison.

--group R,R,...: the listed ranks train data-parallel in a group of their
own (gorun.create_group; broadcast_parameters, DistributedOptimizer with
group=), and every other rank alone, in a group of itself; ranks and sizes
above are then the group's. Members other than the group's rank 0 start
from other weights, which broadcast_parameters replaces. Each group's rank
0 writes --out with "{rank}" replaced by its rank in the job.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def make_data(n, dim, classes, seed=1):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, dim, generator=g)
    return x, y


def make_model(dim, hidden, classes, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["gorun", "ddp", "single"], default="gorun")
    ap.add_argument("--backend", default="gorun", help="process group backend for --mode ddp")
    ap.add_argument("--ranks", type=int, default=2, help="ranks the single-process reference stands for")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16, help="batch per rank")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--out", help="save rank 0's final parameters here")
    ap.add_argument("--group", help="--mode gorun: ranks that train in a group of their own, as 0,2")
    a = ap.parse_args()

    x, y = make_data(4096, 16, 4)
    model = make_model(16, a.hidden, 4)
    if a.mode == "single":
        rank, size, B = 0, 1, a.batch * a.ranks
    elif a.mode == "gorun":
        import gorun
        gorun.init()
        rank, size, B = gorun.rank(), gorun.size(), a.batch
        group, out_rank = None, rank
        if a.group:
            members = [int(k) for k in a.group.split(",")]
            group = gorun.create_group(members if rank in members else [rank])
            rank, size = group.rank(), group.size()
            if rank:
                model = make_model(16, a.hidden, 4, seed=rank)
    else:
        import torch.distributed as dist
        # Registers backend "gorun" and, under the gorun launcher, derives
        # torch's env:// variables from gorun's (for any backend).
        import gorun.torch_backend  # noqa: F401
        dist.init_process_group(a.backend)
        rank, size, B = dist.get_rank(), dist.get_world_size(), a.batch
        model = nn.parallel.DistributedDataParallel(model)

    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    if a.mode == "gorun":
        import gorun
        gorun.broadcast_parameters(model.state_dict(), root=0, group=group)
        opt = gorun.DistributedOptimizer(opt, named_parameters=model.named_parameters(), group=group)

    n = len(y)
    t0 = time.perf_counter()
    for s in range(a.steps):
        start = (s * B * size + rank * B) % (n - n % (B * size))
        xb, yb = x[start:start + B], y[start:start + B]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if rank == 0 and (s % 10 == 0 or s == a.steps - 1):
            print(f"step {s:3d}  loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"{a.mode}: {a.steps} steps in {time.perf_counter() - t0:.2f}s", flush=True)
        if a.out:
            m = model.module if hasattr(model, "module") else model
            out = a.out.replace("{rank}", str(out_rank)) if a.mode == "gorun" else a.out
            torch.save({k: v.detach().clone() for k, v in m.state_dict().items()}, out)
    if a.mode == "gorun":
        import gorun
        gorun.finalize()
    elif a.mode == "ddp":
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
