"""gorun against torch.distributed's Gloo backend, in one job, interleaved.

    gorun -np 2 /usr/bin/python3 examples/torch_bench.py [--rounds 5]

Part 1, gradient allreduce (float32 sum, in place) per size, three ways in
the same processes: gorun's Python binding (gorun.allreduce_), a
torch.distributed process group on backend "gorun", and one on backend
"gloo". Each round runs the three in turn (rotating the order), and rank 0
prints the medians and the ratio Gloo time / gorun time (> 1: gorun faster).

Part 2, a DistributedDataParallel training step (forward, backward with
bucketed allreduce, SGD) of the same MLP with the same bucket size on
backend "gorun" and on "gloo", interleaved the same way.

Every allreduce result is checked.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gorun  # noqa: E402
import gorun.torch_backend  # noqa: E402,F401  registers "gorun", derives torch's env:// variables


def timed(fn, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="1024,65536,1048576,16777216")
    ap.add_argument("--steps", type=int, default=10, help="DDP steps per round")
    ap.add_argument("--bucket-mb", type=float, default=25)
    a = ap.parse_args()

    gorun.init()
    dist.init_process_group("gloo")
    gloo = dist.group.WORLD
    gpg = dist.new_group(backend="gorun")
    rank, size = dist.get_rank(), dist.get_world_size()

    ways = {
        "binding": lambda t: gorun.allreduce_(t),
        "pg-gorun": lambda t: dist.all_reduce(t, group=gpg),
        "pg-gloo": lambda t: dist.all_reduce(t, group=gloo),
    }
    if rank == 0:
        print(f"# {size} ranks; float32 sum allreduce, in place; medians of {a.rounds} interleaved rounds")
        print(f"# {'size':>8} {'binding us':>11} {'pg-gorun us':>12} {'pg-gloo us':>11} {'gloo/binding':>13} {'gloo/pg-gorun':>14}")
    for nbytes in [int(s) for s in a.sizes.split(",")]:
        n = nbytes // 4
        iters = max(3, min(200, (64 << 20) // max(nbytes, 1) // 8))
        res = {w: [] for w in ways}
        for r in range(a.rounds):
            order = list(ways)[r % 3:] + list(ways)[:r % 3]
            for w in order:
                t = torch.full((n,), float(rank + 1))
                ways[w](t)  # warm-up (registration, connection setup)
                if t[0].item() != size * (size + 1) / 2:
                    raise SystemExit(f"{w}: wrong result {t[0].item()}")
                t.fill_(1.0)
                res[w].append(timed(lambda: ways[w](t), iters))
        if rank == 0:
            m = {w: statistics.median(v) * 1e6 for w, v in res.items()}
            print(f"  {human(nbytes):>8} {m['binding']:11.1f} {m['pg-gorun']:12.1f} {m['pg-gloo']:11.1f} "
                  f"{m['pg-gloo'] / m['binding']:12.2f}x {m['pg-gloo'] / m['pg-gorun']:13.2f}x", flush=True)

    # Part 2: DDP training step on both backends.
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    models = {}
    for name, pg in (("gorun", gpg), ("gloo", gloo)):
        m = type(base)(*[nn.Linear(l.in_features, l.out_features) if isinstance(l, nn.Linear) else nn.ReLU() for l in base])
        m.load_state_dict(base.state_dict())
        models[name] = (nn.parallel.DistributedDataParallel(m, process_group=pg, bucket_cap_mb=a.bucket_mb),)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)
    step_times = {k: [] for k in models}
    for r in range(a.rounds):
        for name in (("gorun", "gloo") if r % 2 == 0 else ("gloo", "gorun")):
            ddp = models[name][0]
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

            def step():
                opt.zero_grad()
                F.cross_entropy(ddp(x), y).backward()
                opt.step()
            step()
            step_times[name].append(timed(step, a.steps))
    if rank == 0:
        nparams = sum(p.numel() for p in base.parameters())
        sg, sl = (statistics.median(step_times[k]) * 1e3 for k in ("gorun", "gloo"))
        print(f"# DDP step, MLP of {nparams / 1e6:.1f} M parameters ({nparams * 4 >> 20} MiB of gradients), "
              f"bucket {a.bucket_mb} MiB, batch 64 per rank")
        print(f"  gorun {sg:.2f} ms   gloo {sl:.2f} ms   gloo/gorun {sl / sg:.2f}x", flush=True)
    dist.destroy_process_group()
    gorun.finalize()


if __name__ == "__main__":
    main()
