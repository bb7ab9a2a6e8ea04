"""PyTorch training helpers in the style of Horovod: broadcast_parameters and
DistributedOptimizer, which averages gradients across ranks in fused buckets
while the backward pass is still running.

Each takes group=, a Group from create_group (Horovod's process_set=): then
it runs over the group's ranks only, with ranks and roots numbered in the
group, and "avg" divides by the group's size, so the members train
data-parallel on their own while other ranks do something else."""
import contextlib

from . import allreduce_, iallreduce_, broadcast_, rank, size
from .group import Group


def _on(group, fn, *args):
    """fn(*args) on group's communicator, or on the calling thread's
    current one when group is None."""
    if group is None:
        return fn(*args)
    if not isinstance(group, Group):
        raise TypeError("gorun: group must be a gorun.Group from create_group, not %s" % type(group).__name__)
    return group._call(fn, *args)


def broadcast_parameters(params, root=0, group=None):
    """Copy root's values into every rank's tensors. params: a state_dict,
    named_parameters(), or an iterable of tensors. group: a Group, whose
    members alone call it, root numbered in the group."""
    _on(group, _broadcast_parameters, params, root)


def _broadcast_parameters(params, root):
    import torch
    if hasattr(params, "items"):
        tensors = [t for _, t in sorted(params.items())]
    else:
        tensors = [p[1] if isinstance(p, tuple) else p for p in params]
    with torch.no_grad():
        for t in tensors:
            if t.is_contiguous():
                broadcast_(t.data, root)
            else:
                tmp = t.data.contiguous()
                broadcast_(tmp, root)
                t.data.copy_(tmp)


def broadcast_optimizer_state(optimizer, root=0, group=None):
    """Make every rank's optimizer state (step counts, moments, and
    hyper-parameters of every param group) root's, as Horovod's function of
    that name does: call it after broadcast_parameters when training starts
    or resumes from root's checkpoint. optimizer may be a
    DistributedOptimizer or a plain torch optimizer; the ranks' optimizers
    must have the same parameter groups. group: a Group, root numbered in
    it; by default a DistributedOptimizer's own group."""
    if group is None and isinstance(optimizer, DistributedOptimizer):
        group = optimizer._group
    _on(group, _broadcast_optimizer_state, optimizer, root)


def _broadcast_optimizer_state(optimizer, root):
    from .rooted import broadcast_object
    opt = optimizer._opt if isinstance(optimizer, DistributedOptimizer) else optimizer
    state = broadcast_object(opt.state_dict() if rank() == root else None, root)
    if rank() != root:
        opt.load_state_dict(state)


def join(optimizer):
    """For uneven inputs: a rank that has run out of batches calls
    join(optimizer) instead of training further. Until every rank has
    joined, it takes part in the other ranks' steps with zero gradients, and
    the average is over the ranks still training. Returns the rank that
    joined last (numbered in the optimizer's group, if it has one).
    optimizer is a DistributedOptimizer made with uneven_inputs=True (the
    ranks then agree each step on how many are still training: one 8-byte
    allreduce). A joined rank no longer steps its optimizer, so
    broadcast_parameters from the returned rank afterwards (with the same
    group=)."""
    if not isinstance(optimizer, DistributedOptimizer) or not optimizer._uneven:
        raise ValueError("gorun: join needs a DistributedOptimizer(..., uneven_inputs=True)")
    return _on(optimizer._group, optimizer._join)


class _Bucket:
    def __init__(self, params, dtype):
        self.params = params
        self.dtype = dtype
        self.numel = sum(p.numel() for p in params)
        self.ready = 0
        self.handle = None
        self.buf = None


class DistributedOptimizer:
    """Wraps a torch optimizer: gradients are averaged (op="avg") or summed
    across ranks before every step.

    Hooks on each parameter's gradient accumulator mark it ready during
    backward. Buckets are numbered from the last parameters, and their
    allreduces start in that order on every rank (as in torch's Reducer): a
    bucket starts when its gradients are all ready and every earlier bucket
    has started, so in the usual backward order each starts at once,
    overlapping the rest of the backward pass. step() (or synchronize())
    starts the buckets left, in order, and waits for every bucket, then
    steps the wrapped optimizer. To work on the reduced gradients first
    (clip_grad_norm_), call synchronize() and then step(), which does not
    reduce them again (nor does one inside skip_synchronize()). A parameter this rank did not use (no
    gradient hook fired) contributes its current .grad, or zeros if it has
    none, so ranks may leave different parameters unused. With
    backward_passes_per_step = k, gradients accumulate locally over k
    backward passes first; one pass more before step() raises RuntimeError
    (its gradients would arrive after the bucket was sent).
    compression="fp16" or "bf16" halves the bytes on the wire; with op
    "avg" each rank divides by the size before it rounds, as torch's
    fp16_compress_hook, so an average that fits fp16 arrives even where
    the ranks' sum would not.
    group=g (a Group from create_group, Horovod's process_set) reduces
    over g's ranks only, "avg" dividing by g.size(): g's members train
    data-parallel on their own; the other ranks do not take part."""

    def __init__(self, optimizer, named_parameters=None, bucket_bytes=25 << 20,
                 first_bucket_bytes=1 << 20, op="avg", backward_passes_per_step=1, compression=None,
                 uneven_inputs=False, group=None):
        import torch
        if uneven_inputs and op not in ("avg", "sum"):
            raise ValueError("gorun: uneven_inputs needs op avg or sum")
        if group is not None and not isinstance(group, Group):
            raise TypeError("gorun: group must be a gorun.Group from create_group, not %s" % type(group).__name__)
        self._group = group
        self._opt = optimizer
        self._op = op
        self._uneven = uneven_inputs
        self._steps = 0
        self._passes = backward_passes_per_step
        self._wire = {None: None, "none": None, "fp16": torch.float16, "bf16": torch.bfloat16}[compression]
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [("#%d" % i, p) for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])]
        named = [(name, p) for name, p in named if p.requires_grad]
        params = [p for _, p in named]
        self._names = {p: name for name, p in named}
        self._buckets, self._bucket_of, self._counts = [], {}, {}
        self._next = 0  # the first bucket of this step not yet started
        cur, cur_bytes, limit = [], 0, first_bucket_bytes
        for p in reversed(params):  # backward produces the last layers' gradients first
            nbytes = p.numel() * p.element_size()
            if cur and (cur_bytes + nbytes > limit or p.dtype != cur[0].dtype):
                self._add_bucket(cur)
                cur, cur_bytes, limit = [], 0, bucket_bytes
            cur.append(p)
            cur_bytes += nbytes
        if cur:
            self._add_bucket(cur)
        self._synchronized = False  # synchronize() ran and no gradient hook fired since
        self._skip = False  # inside skip_synchronize()
        self._hooks = []
        for p in params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._hook(p))
            self._hooks.append(acc)  # the accumulator must outlive the hook

    def _add_bucket(self, params):
        b = _Bucket(params, params[0].dtype)
        for p in params:
            self._bucket_of[p] = b
            self._counts[p] = 0
        self._buckets.append(b)

    def _hook(self, p):
        def hook(*_):
            self._synchronized = False
            self._counts[p] += 1
            if self._counts[p] > self._passes:
                raise RuntimeError(
                    "gorun: gradients of parameter %r were computed %d times before step(), more than "
                    "backward_passes_per_step=%d: the later passes would be lost. Increase "
                    "backward_passes_per_step to accumulate gradients locally"
                    % (self._names[p], self._counts[p], self._passes))
            if self._counts[p] == self._passes:
                b = self._bucket_of[p]
                b.ready += 1
                if b.ready == len(b.params):
                    self._launch_ready()
        return hook

    def _launch_ready(self):
        """Start the full buckets from self._next on, in index order, up to
        the first one not full: every rank then starts the same sequence."""
        while self._next < len(self._buckets):
            b = self._buckets[self._next]
            if b.ready < len(b.params):
                break
            self._launch(b)
            self._next += 1

    def _launch(self, b):
        import torch
        grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
                 for p in b.params]
        buf = torch.cat(grads)
        op = "sum" if self._uneven else self._op
        if self._wire is not None:
            if self._op == "avg":
                # Average as torch's fp16_compress_hook (and Go's ddp) do:
                # divide, round, sum. Partial sums travel in the wire type,
                # and the ranks' sum may not fit it where their average does.
                buf, op = buf / self._size(), "sum"
            buf = buf.to(self._wire)
        b.buf = buf
        # With uneven inputs the average is over the ranks still training,
        # known only at the end of the step: sum now, divide then.
        b.handle = _on(self._group, iallreduce_, buf, op)

    def _size(self):
        """The number of ranks this optimizer reduces over."""
        return self._group.size() if self._group is not None else size()

    def _active(self, me):
        """The number of ranks still training this step (me: 1 or 0)."""
        import torch
        self._steps += 1
        n = torch.tensor([me], dtype=torch.int64)
        _on(self._group, allreduce_, n)
        return int(n.item())

    def _join(self):
        import torch
        joined_at = self._steps
        while True:
            for b in self._buckets:
                buf = torch.zeros(b.numel, dtype=self._wire or b.dtype)
                allreduce_(buf)
            if self._active(0) == 0:
                break
        last = torch.tensor([joined_at * size() + rank()], dtype=torch.int64)
        allreduce_(last, "max")
        return int(last.item()) % size()

    def synchronize(self):
        """Start the buckets not yet started, in order, wait for every
        bucket and write the reduced gradients back. Each call is one round
        of collectives, which every rank must make alike (a joined rank
        makes one per round); a step() right after does not make another."""
        import torch
        for b in self._buckets[self._next:]:
            self._launch(b)
        self._next = 0
        active = self._active(1) if self._uneven else 0
        for b in self._buckets:
            b.handle.wait()
            buf = b.buf.to(b.dtype) if self._wire is not None else b.buf
            if self._uneven and self._op == "avg":
                # The wire holds the sum, or with compression the sum over
                # the size: make it the average over the active ranks.
                buf = buf * (self._size() / active) if self._wire is not None else buf / active
            off = 0
            with torch.no_grad():
                for p in b.params:
                    n = p.numel()
                    g = buf[off:off + n].view_as(p)
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
                    off += n
            b.handle, b.buf, b.ready = None, None, 0
        for p in self._counts:
            self._counts[p] = 0
        self._synchronized = True

    def step(self, closure=None):
        """Synchronize, unless synchronize() has run since the last
        gradient hook fired or this is inside skip_synchronize(); then step
        the wrapped optimizer."""
        if not self._skip and not self._synchronized:
            self.synchronize()
        self._synchronized = False
        return self._opt.step(closure)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """A context in which step() does not synchronize, as Horovod's:
        for synchronize(); clip_grad_norm_(...); with
        opt.skip_synchronize(): opt.step(). Call synchronize() first: a
        step() in it uses this rank's gradients as they are."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def zero_grad(self, set_to_none=False):
        return self._opt.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name):
        return getattr(self._opt, name)
