"""Run with /usr/bin/python3 alone, no launcher: two ranks started by
torch.multiprocessing.spawn call init_process_group("gorun", rank=,
world_size=). gorun's Go runtime reads the job from the environment a
process started with, which names no rank, so the backend cannot join
them: each must raise RuntimeError saying to start the ranks with a
launcher (it used to join a job of one rank each and fail with "torch
says rank 0 of 2 but gorun's job says rank 0 of 1"). Prints
"torch_spawn_check: rank R ok" from each."""
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def run(rank, world, port):
    import gorun.torch_backend  # noqa: F401  (registers "gorun")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        dist.init_process_group("gorun", rank=rank, world_size=world)
        raise SystemExit("torch_spawn_check: rank %d: init_process_group returned" % rank)
    except RuntimeError as e:
        if "no launcher started this process" not in str(e) or "gorun -np" not in str(e):
            raise SystemExit("torch_spawn_check: rank %d: error %r does not say to use a launcher" % (rank, str(e)))
    print("torch_spawn_check: rank %d ok" % rank, flush=True)


if __name__ == "__main__":
    for v in ("RANK", "WORLD_SIZE", "GORUN_RANK", "GORUN_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        os.environ.pop(v, None)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(run, args=(2, port), nprocs=2)
