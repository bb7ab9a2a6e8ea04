"""Run with /usr/bin/python3 alone, no launcher: ranks started by
torch.multiprocessing.spawn call init_process_group("gorun"), twice over:
with rank= and world_size=, and with RANK and WORLD_SIZE set in
os.environ by the rank itself (env://). gorun's Go runtime reads the job
from the environment a process started with, which names no launcher
either way, so the backend cannot join them: each must raise
RuntimeError saying to start the ranks with a launcher. They used to
join a job of one rank each and fail with "torch says rank 0 of 2 but
gorun's job says rank 0 of 1" (the second way until gorun_launched: the
backend looked for RANK in os.environ, which the script had set). Prints
"torch_spawn_check: rank R ok" from each."""
import os
import socket
import sys
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def refused(rank, how, init):
    try:
        init()
        raise SystemExit("torch_spawn_check: rank %d (%s): init_process_group returned" % (rank, how))
    except RuntimeError as e:
        if "no launcher started this process" not in str(e) or "gorun -np" not in str(e):
            raise SystemExit("torch_spawn_check: rank %d (%s): error %r does not say to use a launcher"
                             % (rank, how, str(e)))


def run(rank, world, ports, both):
    import gorun.torch_backend  # noqa: F401  (registers "gorun")
    # init_process_group's store on rank 0 serves the others, and goes
    # when rank 0's init raises; a rank still connecting to it then (its
    # TCPStore connects twice) retried for the store's 30 minutes (CI,
    # 2026-12-03: rank 1 hung). Rank 0 holds each port's server here
    # (init_process_group's store shares it: multi_tenant), and lets go
    # only when every rank has been refused (the barrier "both").
    keep = [dist.TCPStore("127.0.0.1", p, world, True, timedelta(seconds=60), wait_for_workers=False,
                          multi_tenant=True) for p in ports] if rank == 0 else []
    both.wait()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(ports[0])
    refused(rank, "rank=, world_size=", lambda: dist.init_process_group("gorun", rank=rank, world_size=world))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_PORT=str(ports[1]))
    refused(rank, "RANK and WORLD_SIZE in os.environ", lambda: dist.init_process_group("gorun"))
    both.wait()
    del keep
    print("torch_spawn_check: rank %d ok" % rank, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":
    for v in ("RANK", "WORLD_SIZE", "GORUN_RANK", "GORUN_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
              "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        os.environ.pop(v, None)
    mp.spawn(run, args=(2, (free_port(), free_port()), mp.get_context("spawn").Barrier(2, timeout=120)), nprocs=2)
