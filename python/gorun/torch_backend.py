"""torch.distributed backend "gorun".

    import gorun.torch_backend          # registers the backend
    import torch.distributed as dist
    dist.init_process_group("gorun")    # under `gorun -np N` or torchrun

The backend is a C++ extension (csrc/process_group_gorun.cpp) built against
Debian's torch headers (libtorch-dev) on first import and cached in the
build directory; `python3 -m gorun.torch_backend` builds it ahead of time.
It forwards to gorun's C ABI. Under the gorun launcher, torch's env://
rendezvous variables are derived from gorun's (RANK, WORLD_SIZE,
LOCAL_RANK from GORUN_*; MASTER_ADDR from the first gossip seed and
MASTER_PORT = its port + 1), so scripts written for torchrun run unchanged;
likewise under mpirun (MPICH or Open MPI) and srun, given GORUN_SEEDS.

Subgroups are not supported: every process group of backend "gorun" runs
on the job's whole communicator, and gorun's C ABI cannot make one of
some of its ranks. dist.new_group() over every rank works (the ranks are
sorted, so any order of all of them is the world); dist.new_group(ranks)
over fewer raises RuntimeError at once on each member, and returns
GroupMember.NON_GROUP_MEMBER on the others, as for any group they are
not in. Give such a group backend="gloo".
"""
import fcntl
import os
import sys
import time

import torch
import torch.distributed as dist

from . import _lib, init as _gorun_init

_ext = None


# Where a launcher other than gorun and torchrun puts a rank's place, as
# internal/jobenv reads it for gorun's own rendezvous: (rank, size, local
# rank) variables of MPICH's Hydra and Open MPI's mpirun, and Slurm's srun.
_LAUNCHERS = [
    ("GORUN_RANK", "GORUN_SIZE", "GORUN_LOCAL_RANK"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
]


def _derive_env():
    g = os.environ
    if "RANK" in g and "WORLD_SIZE" in g:
        return  # torchrun, or set by hand
    for rank, size, local in _LAUNCHERS:
        if rank in g:
            break
    else:
        return
    g.setdefault("RANK", g[rank])
    g.setdefault("WORLD_SIZE", g.get(size, "1"))
    g.setdefault("LOCAL_RANK", g.get(local, "0"))
    # MASTER_ADDR/PORT for torch's store: next to gorun's first seed (under
    # mpirun and srun, GORUN_SEEDS is what lets the ranks find each other).
    seed = g.get("GORUN_SEEDS", "").split(",")[0]
    if seed and "MASTER_ADDR" not in g:
        host, _, port = seed.rpartition(":")
        g["MASTER_ADDR"] = host.strip("[]") or "127.0.0.1"
        g.setdefault("MASTER_PORT", str(int(port) + 1))


def load_extension(verbose=False):
    """Build (once, cached) and load the C++ extension."""
    global _ext
    if _ext is None:
        from . import _L
        _L()  # load libgorun.so (RTLD_GLOBAL) first: the extension's symbols resolve to it
        from torch.utils.cpp_extension import load
        libdir = os.path.dirname(_lib.library_path())
        here = os.path.dirname(os.path.abspath(__file__))
        repo = os.path.dirname(os.path.dirname(here))
        build = os.path.join(libdir, "torch_ext")
        os.makedirs(build, exist_ok=True)
        src = os.path.join(here, "csrc", "process_group_gorun.cpp")
        built = os.path.join(build, "gorun_c10d.so")
        # The ranks of a host load one at a time, under a lock the kernel
        # releases when its holder dies. torch's own lock (the file
        # "lock", created and deleted) outlives a rank killed while it
        # builds, and every later load would then wait for it forever; no
        # one else can be building while this lock is held, so a "lock"
        # found here is such a leftover.
        with open(os.path.join(build, "load.flock"), "w") as flock:
            fcntl.flock(flock, fcntl.LOCK_EX)
            leftover = os.path.join(build, "lock")
            if os.path.exists(leftover):
                _progress("removing %s, left by a process killed while building" % leftover)
                os.remove(leftover)
            stale = not os.path.exists(built) or os.path.getmtime(built) < os.path.getmtime(src)
            if stale:
                _progress("building the torch.distributed extension in %s (about a minute, once)..." % build)
            t0 = time.monotonic()
            _ext = load(
                name="gorun_c10d",
                sources=[src],
                extra_include_paths=[os.path.join(repo, "include")],
                # No -lgorun: the gorun_* symbols bind at load time to the
                # libgorun.so that the Python package already loaded with
                # RTLD_GLOBAL, so the process never holds two Go runtimes.
                build_directory=build,
                verbose=verbose,
            )
            if stale:
                _progress("torch.distributed extension ready (%.0f s)" % (time.monotonic() - t0))
    return _ext


def _progress(msg):
    """Build progress on stderr, from the one process that builds."""
    print("gorun: " + msg, file=sys.stderr, flush=True)


def _create(store, rank, size, timeout):
    ext = load_extension()
    comm = _gorun_init()
    # torch calls the creator on a new group's members only, after the
    # default group exists; the default group itself is the world.
    if dist.is_initialized() and size != dist.get_world_size():
        _refuse_subgroup(size, dist.get_world_size())
    return ext.ProcessGroupGorun(comm, rank, size)


def _refuse_subgroup(size, world):
    """Raise on a member of dist.new_group(ranks) over size < world ranks.
    torch 1.13's new_group ends with a barrier in the default store that
    every rank of the world enters, members after the creator returns; a
    member that raises never enters it, and the other ranks would wait
    there until new_group's timeout (30 minutes). So each member checks
    in for itself first, and they return."""
    c10d = dist.distributed_c10d
    try:
        default_store = c10d._pg_map[c10d._get_default_group()][1]
        default_store.add("%s:%d" % (c10d.STORE_BASED_BARRIER_PREFIX, c10d._group_count), 1)
    except (AttributeError, KeyError, TypeError):
        pass  # another torch's internals: its barrier is not this one
    raise RuntimeError(
        "gorun backend: subgroups are not supported: dist.new_group over %d of the %d ranks needs a "
        "communicator of just those ranks, which gorun's C ABI cannot make (give that group "
        "backend=\"gloo\", or use every rank)" % (size, world))


_derive_env()
if "GORUN" not in dist.Backend._plugins:
    dist.Backend.register_backend("gorun", _create)

if __name__ == "__main__":
    load_extension(verbose=True)
    print("gorun torch backend built")
