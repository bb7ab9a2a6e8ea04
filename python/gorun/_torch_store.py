"""torch's store across a destroy_process_group and init_process_group
in the same processes (the torch backend's; torch 1.13).

torch's env:// and tcp:// rendezvous make the same store each time: rank
0 hosts a TCPStore server on MASTER_PORT, the other ranks connect to it,
and every init writes the same keys ("default_pg/..." and the store-based
barrier's count, which must reach exactly the world size). Rank 0's server
lives until rank 0 destroys its process group. So a rank that initialises
again before rank 0 has destroyed its group connects to the old server:
its keys are the first init's, torch's barrier never counts the world
size, rank 0's new server waits for workers that went elsewhere, and the
old server's end breaks the others' calls ("Broken pipe"). Gloo hides it
by luck (its destroy takes some 40 ms on every rank, rank 0's server
going first); gorun's takes about 1 ms.

ordered_destroy closes that gap: the other ranks' destroy_process_group
returns once rank 0 has destroyed its group and let its store go.
stale() turns the cases no order helps into an error that says why
(torchrun's agent store, which keeps every key for the job; a store=
used again without a new prefix), where torch's barrier would wait out
its whole timeout.
"""
import datetime
import os
import socket
import weakref

import torch.distributed as dist

_generation = 0  # default groups made in this process, alike on every rank


def stale(opts):
    """Raise RuntimeError if the store opts.store already counted this
    group's members: it holds an earlier init's keys."""
    n = opts.store.add("gorun_torch/members", 1)
    if n <= opts.group_size:
        return
    raise RuntimeError(
        "gorun backend: torch's store for process group %r already holds an earlier init_process_group's keys "
        "(%d members counted, the group has %d), so torch's store-based barrier would wait out its whole "
        "timeout. torch 1.13 initialises again only on a store without them: under torchrun the agent's store "
        "keeps every key for the job (restart the ranks instead: torchrun --max-restarts); with env:// or "
        "tcp://, rank 0 hosts the store and every rank must have destroyed the process group before any "
        "initialises again (destroy_process_group waits for that unless a process group of another backend, "
        "still referenced on rank 0, keeps rank 0's store alive); with file://, use a new file; or pass "
        "init_process_group(store=PrefixStore(<a new prefix for each attempt>, store))"
        % (opts.group_id, n - 1, opts.group_size))


def ordered_destroy(opts, rank):
    """For the default group about to be made from opts: make its
    destroy_process_group, on every rank but 0, return only once rank 0
    has let its store go (its server closed, unless a group of another
    backend still holds it), so that a later init_process_group meets
    rank 0's next store and not this one.

    The other ranks cannot learn it from the store itself: a closing
    TCPStore server closes its clients' connections before its listening
    socket, and a connection made in between is reset once accepted,
    failing the next init's client ("Connection reset by peer"). So rank
    0 listens on a socket of its own, which the others connect to, and
    closes it once the store is let go; they wait for that.

    It applies where the group's store is a PrefixStore over a TCPStore
    (torch's own env:// and tcp:// rendezvous wrap theirs so, and store=
    PrefixStore(...) is so too), not under torchrun's agent store. It
    watches the PrefixStore torch keeps for the group (destroy drops it),
    not the process group, which DDP may hold past destroy."""
    global _generation
    _generation += 1
    watched = opts.store.underlying_store  # torch's "default_pg" store, or the caller's store=
    if opts.group_size < 2 or not isinstance(watched, dist.PrefixStore):
        return
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        return  # the agent's store outlives every group: stale() says so at the next init
    tcp = watched.underlying_store
    while isinstance(tcp, dist.PrefixStore):
        tcp = tcp.underlying_store
    if not isinstance(tcp, dist.TCPStore):
        return
    key = "gorun_torch/destroyed/%d" % _generation
    timeout = opts.timeout or datetime.timedelta(minutes=30)
    if rank == 0:
        family = socket.getaddrinfo(tcp.host, tcp.port, type=socket.SOCK_STREAM)[0][0]
        sig = socket.create_server(("", 0), family=family, backlog=opts.group_size)
        tcp.set(key, str(sig.getsockname()[1]))
        fin = weakref.finalize(watched, _rank0_destroyed, [tcp], sig)
    else:
        sig = socket.create_connection((tcp.host, int(tcp.get(key))), timeout=timeout.total_seconds())
        fin = weakref.finalize(watched, _await_rank0, sig)
    fin.atexit = False  # a process that ends without destroy waits for no one


def _rank0_destroyed(held, sig):
    held.clear()  # the TCPStore: if this was its last holder, its server is closed when this returns
    sig.close()  # resets the others' connections, never accepted: their destroy returns


def _await_rank0(sig):
    try:
        sig.recv(1)  # until rank 0 closes its socket (or ends), or the group's timeout passes
    except OSError:
        pass
    sig.close()
