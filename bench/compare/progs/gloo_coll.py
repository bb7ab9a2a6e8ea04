"""gloo_coll: the torch.distributed Gloo side of bench/compare.

Times dist.all_reduce (float32 sum, in place) or dist.broadcast (root 0) on
backend "gloo" over a list of sizes, or dist.barrier alone (one line of size
0), and on rank 0 prints one line per size:
    bytes count time_us algbw_GBps busbw_GBps wrong
Every iteration's result is checked (values are exact in float32).
Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set:
    gloo_coll.py allreduce|broadcast|barrier WARMUP ITERS BYTES...
Use Debian's interpreter (/usr/bin/python3) for Debian's python3-torch.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    mode, warm, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sizes = [int(s) for s in sys.argv[4:]]
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    bcast = mode == "broadcast"
    if mode == "barrier":
        total = 0.0
        for it in range(-warm, iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.barrier()
            if it >= 0:
                total += time.perf_counter() - t0
        t = torch.tensor([total], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"0 0 {t.item() / iters * 1e6:.2f} 0 0 0", flush=True)
        sizes = []
    for nbytes in sizes:
        n = max(1, nbytes // 4)
        buf = torch.empty(n, dtype=torch.float32)
        total, wrong = 0.0, 0
        for it in range(-warm, iters):
            k = it + warm if it < 0 else it
            v = (k % 7 + 1)
            buf.fill_((0 if rank == 0 else 99) + v if bcast else (rank + 1) * v)
            dist.barrier()
            t0 = time.perf_counter()
            if bcast:
                dist.broadcast(buf, 0)
            else:
                dist.all_reduce(buf)
            dt = time.perf_counter() - t0
            if it >= 0:
                total += dt
                want = v if bcast else size * (size + 1) // 2 * v
                wrong += int((buf != want).sum().item())
        t = torch.tensor([total], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(w)
        if rank == 0:
            us = t.item() / iters * 1e6
            algbw = n * 4 / (us * 1e-6) / 1e9
            factor = 1.0 if bcast else 2.0 * (size - 1) / size
            print(f"{n*4} {n} {us:.2f} {algbw:.3f} {algbw*factor:.3f} {w.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
