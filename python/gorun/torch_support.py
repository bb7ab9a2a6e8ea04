"""PyTorch training helpers in the style of Horovod: broadcast_parameters and
DistributedOptimizer, which averages gradients across ranks in fused buckets
while the backward pass is still running."""
from . import iallreduce_, broadcast_


def broadcast_parameters(params, root=0):
    """Copy root's values into every rank's tensors. params: a state_dict,
    named_parameters(), or an iterable of tensors."""
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
    backward; when a bucket's gradients are all ready its allreduce starts at
    once, overlapping the rest of the backward pass. step() waits for every
    bucket, then steps the wrapped optimizer. With backward_passes_per_step
    = k, gradients accumulate locally over k backward passes first.
    compression="fp16" or "bf16" halves the bytes on the wire."""

    def __init__(self, optimizer, named_parameters=None, bucket_bytes=25 << 20,
                 first_bucket_bytes=1 << 20, op="avg", backward_passes_per_step=1, compression=None):
        import torch
        self._opt = optimizer
        self._op = op
        self._passes = backward_passes_per_step
        self._wire = {None: None, "none": None, "fp16": torch.float16, "bf16": torch.bfloat16}[compression]
        if named_parameters is not None:
            params = [p for _, p in named_parameters]
        else:
            params = [p for g in optimizer.param_groups for p in g["params"]]
        params = [p for p in params if p.requires_grad]
        self._buckets, self._bucket_of, self._counts = [], {}, {}
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
            self._counts[p] += 1
            if self._counts[p] == self._passes:
                b = self._bucket_of[p]
                b.ready += 1
                if b.ready == len(b.params):
                    self._launch(b)
        return hook

    def _launch(self, b):
        import torch
        grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
                 for p in b.params]
        buf = torch.cat(grads)
        if self._wire is not None:
            buf = buf.to(self._wire)
        b.buf = buf
        b.handle = iallreduce_(buf, self._op)

    def synchronize(self):
        """Wait for every bucket and write the reduced gradients back."""
        import torch
        for b in self._buckets:
            if b.handle is None:
                self._launch(b)
        for b in self._buckets:
            b.handle.wait()
            buf = b.buf.to(b.dtype) if self._wire is not None else b.buf
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

    def step(self, closure=None):
        self.synchronize()
        return self._opt.step(closure)

    def zero_grad(self, set_to_none=False):
        return self._opt.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name):
        return getattr(self._opt, name)
