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


def run(rank, world, ports):
    import gorun.torch_backend  # noqa: F401  (registers "gorun")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(ports[0])
    refused(rank, "rank=, world_size=", lambda: dist.init_process_group("gorun", rank=rank, world_size=world))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_PORT=str(ports[1]))
    refused(rank, "RANK and WORLD_SIZE in os.environ", lambda: dist.init_process_group("gorun"))
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
    mp.spawn(run, args=(2, (free_port(), free_port())), nprocs=2)
