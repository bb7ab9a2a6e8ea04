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
Ranks no launcher started (torch.multiprocessing.spawn, with
init_process_group(rank=, world_size=) or RANK and WORLD_SIZE set by the
script) are refused with an error that says so: the Go runtime reads the
job from the environment the process started with (gorun_launched).

dist.new_group(ranks) works over any ranks. A group of every rank (in
any order: torch sorts them) runs on the job's communicator, as the
default group does; a group of fewer gets a communicator of its own,
which its members make with gorun_comm_create_group (MPI_Comm_create_group:
the other ranks take no part and just return GroupMember.NON_GROUP_MEMBER
from new_group). As with torch's own backends, dist's functions take
global ranks (a broadcast's src, a send's dst) on any group, and torch
hands the group's backend their ranks in the group.

Work.wait(timeout) raises RuntimeError once timeout has passed, as torch's
backends do. gorun cannot cancel an operation in flight, so a wait that
times out also aborts its group's communicator (as torch's NCCL backend
does): that operation and every later one on the group fail, on this rank
and on the group's other members, with an error that says so, rather than
waiting behind it. A subgroup's timeout leaves the default group usable;
the default group's is the job's communicator, which the gorun package's
own calls share. Every operation is bounded by its group's timeout
(init_process_group's or new_group's timeout=, torch's 30 minutes unless
given), counted from its start (a send's or recv's from when it may run),
as Gloo's are: a watchdog thread aborts the group's communicator as above
once it passes. GORUN_TIMEOUT bounds each wait in gorun as well.

destroy_process_group() then init_process_group() again in the same
processes works, as with Gloo, also after the group was aborted (a failed
operation, a timeout, a refusal): the new default group runs on a new
job communicator (finalize and init on every rank), and a rank's destroy
of the default group returns once rank 0's has let go of torch's store
(_torch_store: torch's env:// and tcp:// make rank 0's TCPStore again on
the same port, with the same keys). Where the store still holds an
earlier init's keys (torchrun's agent store; store= used again without a
new prefix), init_process_group raises saying so, rather than wait out
torch's store-based barrier. A group destroyed (or its last reference
dropped, also by a then() callback holding it) while its operations'
futures still have then() callbacks to run returns once they have run.
A script that ends without destroying its groups leaves the same way:
gorun's own atexit hook (which runs after every hook registered after
init_process_group) first stops the groups, then finalizes the job's
communicator. Each group waits for its operations left and their
callbacks, as a destroy does (a peer still running may yet start them;
the group's timeout and GORUN_TIMEOUT bound each), stops its threads (a
callback still running once the interpreter finalized ended the process
with SIGSEGV, as Gloo's does) and finalizes a communicator of its own:
groups with their own first, in the order they were made, so that a peer
whose exit waits for an operation this rank never started fails it at
once, naming this rank, instead of waiting out its timeout (NCCL's
destroy aborts whatever is left; Gloo's waits, as this does). After
that (an atexit hook registered before init_process_group), making a
group or starting an operation raises RuntimeError saying the
interpreter exits, and a daemon thread that calls a group, or returns
from one, waits there until the process ends: the interpreter ends such
a thread as it takes the GIL back, which aborted the process (as with
Gloo).

A strided (not contiguous) tensor goes through a contiguous copy in the
collectives, as with Gloo; a send or recv refuses it, as Gloo's do. A
bool tensor's SUM is OR and its PRODUCT AND, as in torch's NCCL backend.
An argument the backend refuses (a tensor not on the CPU, a send's or
recv's not contiguous, a recv from any source, a dtype or reduce op gorun
lacks (PREMUL_SUM; AVG of bools), a bitwise op on floats, an
output, list or split sizes that do not fit the input) raises RuntimeError
on that rank and fails the call at once on the group's other members,
whose RuntimeError names that rank and what it refused (gorun_refuse);
like a failed operation, it aborts the group's communicator, so make a
new group. The checks torch.distributed's own functions make before they
call the backend (a scatter_list missing on the source rank, tensors of
mixed dtypes) still raise on that rank alone.
"""
import fcntl
import os
import sys
import time
import zlib

import torch
import torch.distributed as dist

from . import GorunError, _L, _before_finalize_at_exit, _lib, _torch_store, finalize as _gorun_finalize, init as _gorun_init, size as _job_size

_ext = None


# Where a launcher other than torchrun puts a rank's place, as
# internal/jobenv reads it for gorun's own rendezvous: (rank, size, local
# rank) variables of gorun, Open MPI's mpirun, MPICH's Hydra and Slurm's
# srun, in jobenv's order. A copy: torch's rendezvous comes before
# gorun_init, and the C ABI tells nothing of the job until then.
# TestTorchLaunchersMatchJobenv (python/torch_launchers_test.go) holds it
# to jobenv's list.
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
                _progress("building the torch.distributed extension in %s (once; some seconds)..." % build)
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


def _create(opts, pg_options=None):
    """The creator torch calls (extended_api=True) on the members of a new
    process group only: the default group, then each dist.new_group(ranks)
    on the ranks it lists. opts carries group_rank, group_size, the group's
    name (group_id) and its members' global ranks in group-rank order
    (global_ranks_in_group; empty for the default group)."""
    if _exiting:
        # Its threads would outlive the stop (a then() callback's,
        # ended by the interpreter's finalization, crashed the process)
        # and it would run on a finalized communicator.
        raise RuntimeError(
            "gorun backend: cannot make a process group while the interpreter exits: at exit gorun already "
            "stopped the backend's process groups and finalized the job's communicator (an atexit hook "
            "registered before init_process_group runs after gorun's own); make the group before the script "
            "ends, or register the hook after init_process_group")
    if opts.group_size > 1 and not _L().gorun_launched():
        # torch.multiprocessing.spawn, or ranks started by hand with
        # init_process_group(rank=, world_size=) or with RANK and
        # WORLD_SIZE set by the script: gorun's Go runtime reads the job
        # from the environment the process started with (gorun_launched
        # asks it), which names no launcher, and would join a job of one.
        raise RuntimeError(
            "gorun backend: no launcher started this process (the environment it started with has no "
            "GORUN_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or torchrun's RANK and WORLD_SIZE; "
            "gorun reads no variable the script sets itself), so gorun cannot join a job of %d ranks: start "
            "the ranks with gorun -np N, torchrun, mpirun or srun (torch.multiprocessing.spawn is not "
            "supported, with init_process_group(rank=, world_size=) or with RANK and WORLD_SIZE set in "
            "os.environ)" % opts.group_size)
    _torch_store.stale(opts)  # before gorun's own rendezvous, which the other ranks may not reach
    ext = load_extension()
    default = not dist.is_initialized()  # the default group: torch sets it once this returns
    comm = _job_comm() if default else _gorun_init()
    ranks = list(opts.global_ranks_in_group)
    if ranks == list(range(_job_size())):
        ranks = []  # the whole job, in its own order: the job's communicator
    # torch's timeout for the group (init_process_group's or new_group's
    # timeout=, 30 minutes unless given) bounds each operation, as Gloo's.
    timeout_ms = int(opts.timeout.total_seconds() * 1000) if opts.timeout else 0
    pg = ext.ProcessGroupGorun(comm, opts.group_rank, opts.group_size, ranks, _group_tag(opts.group_id), timeout_ms)
    if default:
        _torch_store.ordered_destroy(opts, opts.group_rank)
    return pg


_exiting = False  # _stop_at_exit ran: no group is made after it


def _stop_at_exit():
    """Finish every group's operations and then() callbacks, and stop
    its threads, while they may still take the GIL: once the interpreter
    finalizes, a thread that takes it is ended where it stands, and a
    callback ended so crashed the process (SIGSEGV at exit). gorun's own
    exit hook runs it just before it finalizes the job's communicator:
    registering a hook of our own at each group's making, to run first,
    took it off the list when a group was made by an atexit hook (one
    registered while they run is never run)."""
    global _exiting
    _exiting = True
    if _ext is not None:
        _ext.stop_all()


_default_comm = None  # the job's communicator the last default group ran on


def _job_comm():
    """The job's communicator for a new default group. One an earlier
    default group ran on is made anew (finalize, then init: a rendezvous
    of every rank, which every rank's init_process_group makes alike): it
    may have been aborted (a failed operation, a timeout, a refusal, on
    any rank), and a rank cannot tell alone whether a peer's abort has
    reached it yet. gorun.Group objects made on the old one are freed."""
    global _default_comm
    comm = _gorun_init()
    if comm == _default_comm:  # handles are never used twice
        try:
            _gorun_finalize()
        except GorunError:
            pass  # it failed before, and said so where it failed
        comm = _gorun_init()
    _default_comm = comm
    return comm


def _group_tag(name):
    """The tag of the messages by which a group's members make its
    communicator: the same on every member, another for each group. torch
    1.13 names groups by a count every rank keeps alike ("0", "1", ...),
    used as is; another name (torch 2.x may hash the ranks) is hashed
    again, where two groups that collide still work, since every rank
    makes groups in the same order and a pair's messages match in order.
    gorun matches a pair's messages in order, whatever their tags, so a
    send or recv between two members on the world group that is pending
    when they make a group breaks the group's making (an error naming
    the rank, on every member). Tags are negative, where torch's send
    and recv use 0 unless a script picks one, so that such a message is
    an error rather than taken for one of these."""
    n = int(name) if name.isdigit() else zlib.crc32(name.encode())
    return -1 - (n & 0x3FFFFFFF)


_derive_env()
if _stop_at_exit not in _before_finalize_at_exit:
    _before_finalize_at_exit.append(_stop_at_exit)
if "GORUN" not in dist.Backend._plugins:
    # extended_api: the creator is told the group's global ranks and name
    # (torch 1.13 and 2.x), which a subgroup's communicator needs.
    dist.Backend.register_backend("gorun", _create, extended_api=True)

if __name__ == "__main__":
    load_extension(verbose=True)
    print("gorun torch backend built")
