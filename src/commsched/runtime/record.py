"""Record what stock ``DistributedDataParallel`` does in each step, as the simulator's Timeline.

:class:`StepRecorder` attaches to a DDP model through its public hooks only:

- a DDP comm hook (``register_comm_hook``) stamps each bucket's launch (the reducer calls the hook
  the moment the bucket is ready and every bucket before it launched; the all-reduce may then wait
  in gloo's queue, so this is the launch, not the start of execution) and, from the all-reduce
  future's completion callback, its end; it scales the bucket by 1/world before the all-reduce, as
  stock DDP's reducer does without a hook (a multiplication while copying gradients in; with
  ``gradient_as_bucket_view=True`` a division of the bucket), so the gradients are those of stock
  DDP, bit for bit in the tests (world size 2, the default ``gradient_as_bucket_view=False``);
- ``register_post_accumulate_grad_hook`` on every trainable parameter stamps when its gradient is
  ready (the moment DDP's own hook on the same accumulator marks it ready);
- forward pre- and post-hooks on the DDP module stamp the step's start and the end of forward;
- an autograd engine callback closes the step after DDP's own end-of-backward callback (which waits
  for every bucket and copies the averaged gradients back). DDP queues that one once its last
  bucket is launched; the engine runs callbacks in the order queued, including those queued by a
  running callback. So the first bucket's hook queues a callback that queues the closing one, which
  then lands behind DDP's.

A step is recorded when its forward ran with gradients enabled outside ``no_sync()`` (the steps
that reduce). Times are seconds since the start of that forward. On CUDA, host stamps of NCCL
work would be enqueue times: there the recorder records CUDA events instead (written against the
documented API; no GPU has run it, see the README).

The cost: one Python call per bucket and per parameter, and the in-place scaling of each bucket.
With the default ``gradient_as_bucket_view=False`` that scaling is one more pass over the gradients
than stock DDP makes (it scales while copying them in, which it does only without a hook: on this
project's CPU, 7.9 ms for resnet50's 98 MB, about 1% of its step); with ``True`` stock DDP makes
the same pass. BENCHMARKS.md measures the whole against stock DDP without a hook.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from commsched.types import Span, Timeline


@dataclass(frozen=True)
class StepRecord:
    """One synchronised step, seconds relative to the start of forward.

    ``ready_s`` is per tensor in ``tensor_names`` order (nan when the tensor got no gradient this
    step); buckets are in launch order (DDP's bucket index), with the tensors each carried.
    """

    forward_end_s: float
    ready_s: tuple[float, ...]
    bucket_start_s: tuple[float, ...]
    bucket_end_s: tuple[float, ...]
    bucket_bytes: tuple[int, ...]
    step_end_s: float  # averaged gradients are back in param.grad
    tensor_names: tuple[str, ...] = ()
    bucket_tensors: tuple[tuple[str, ...], ...] = field(default=())

    def timeline(self) -> Timeline:
        """The measured step as the simulator's Timeline (same trace and Gantt exports)."""
        ready = [r for r in self.ready_s if r == r]
        backward_end = max(ready) if ready else self.forward_end_s
        spans = [
            Span("forward", "forward", 0.0, self.forward_end_s),
            Span("backward", "backward", self.forward_end_s, backward_end),
        ]
        spans += [
            Span("allreduce", f"bucket {j}", s, e, b)
            for j, (s, e, b) in enumerate(zip(self.bucket_start_s, self.bucket_end_s, self.bucket_bytes))
        ]
        comm = sum(e - s for s, e in zip(self.bucket_start_s, self.bucket_end_s))
        end = max([backward_end, *self.bucket_end_s])
        return Timeline(
            spans=tuple(spans),
            iteration_s=end,
            compute_s=backward_end,
            comm_s=comm,
            non_overlapped_comm_s=end - backward_end,
        )

    def breakdown(self) -> dict[str, float]:
        """Computation only, communication only and their overlap (seconds, within this step)."""
        ready = [r for r in self.ready_s if r == r]
        compute = (0.0, max(ready) if ready else self.forward_end_s)
        comm = _union(list(zip(self.bucket_start_s, self.bucket_end_s)))
        comm_total = sum(e - s for s, e in comm)
        overlap = sum(max(0.0, min(e, compute[1]) - max(s, compute[0])) for s, e in comm)
        return {
            "computation_only_s": compute[1] - compute[0] - overlap,
            "communication_only_s": comm_total - overlap,
            "overlap_s": overlap,
        }


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


class StepRecorder:
    """Records every reducing step of a DDP model (see the module docstring); ``records`` holds them.

    Attach it before the first step (DDP takes one comm hook, before training). ``names`` maps
    parameters to names (default: the wrapped module's ``named_parameters``); ``order`` fixes the
    order of ``ready_s`` (default: the order in which gradients became ready in the first step).
    """

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, order: tuple[str, ...] | None = None) -> None:
        # weakly: DDP's reducer holds this recorder (the comm hook's state) from C++, where Python's
        # collector cannot see the cycle a strong reference back would close
        self._ddp = weakref.ref(ddp)
        self.records: list[StepRecord] = []
        named = [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
        self._name_of = {id(p): n for n, p in named}
        self._order = tuple(order) if order is not None else None
        self._world = dist.get_world_size(ddp.process_group)
        self._divide = bool(ddp.gradient_as_bucket_view)
        self._group = ddp.process_group
        self._cuda = next(iter(ddp.module.parameters())).is_cuda
        self._armed = False
        self._reset()
        self._handles = [p.register_post_accumulate_grad_hook(self._make_ready_hook(n)) for n, p in named]
        self._handles.append(ddp.register_forward_pre_hook(self._on_forward_start))
        self._handles.append(ddp.register_forward_hook(self._on_forward_end))
        ddp.register_comm_hook(self, _recording_hook)

    # --- per step -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._t0 = 0.0
        self._forward_end = 0.0
        self._ready: dict[str, float] = {}
        self._buckets: dict[int, list] = {}  # index -> [start, end, bytes, names]
        self._closing = False

    def _now(self):
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _on_forward_start(self, module, _args) -> None:
        self._armed = torch.is_grad_enabled() and module.require_backward_grad_sync
        if self._armed:
            self._reset()
            self._t0 = self._now()

    def _on_forward_end(self, _module, _args, _out) -> None:
        if self._armed:
            self._forward_end = self._now()

    def _make_ready_hook(self, name: str):
        def hook(_param: torch.Tensor) -> None:
            if self._armed and name not in self._ready:
                self._ready[name] = self._now()

        return hook

    def _close_after_ddp(self) -> None:
        torch.autograd.Variable._execution_engine.queue_callback(self._close)

    def _close(self) -> None:
        """End of backward, after DDP's own finalisation (see the module docstring)."""
        end = self._now()
        if self._cuda:
            torch.cuda.synchronize()
        rel = self._seconds
        ready = {n: rel(t) for n, t in self._ready.items()}
        if self._order is None:
            self._order = tuple(sorted(ready, key=ready.get))  # first step: the ready order
        idx = sorted(self._buckets)
        b = self._buckets
        self.records.append(
            StepRecord(
                forward_end_s=rel(self._forward_end),
                ready_s=tuple(ready.get(n, float("nan")) for n in self._order),
                bucket_start_s=tuple(rel(b[j][0]) for j in idx),
                bucket_end_s=tuple(rel(b[j][1]) if b[j][1] is not None else float("nan") for j in idx),
                bucket_bytes=tuple(b[j][2] for j in idx),
                step_end_s=rel(end),
                tensor_names=self._order,
                bucket_tensors=tuple(b[j][3] for j in idx),
            )
        )
        self._armed = False

    def _seconds(self, stamp) -> float:
        if self._cuda:
            return self._t0.elapsed_time(stamp) / 1e3
        return stamp - self._t0

    def remove(self) -> None:
        """Stop recording (the comm hook stays: DDP cannot unregister one; it keeps scaling and reducing)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._armed = False


def _recording_hook(rec, bucket):  # no annotations: DDP checks them, and they are strings here (PEP 563)
    buf = bucket.buffer()
    if rec._divide:  # what the reducer does without a hook (module docstring)
        buf.div_(rec._world)
    else:
        buf.mul_(1.0 / rec._world)
    armed = rec._armed
    if armed:
        if not rec._closing:
            rec._closing = True
            torch.autograd.Variable._execution_engine.queue_callback(rec._close_after_ddp)
        entry = [rec._now(), None, buf.numel() * buf.element_size(), tuple(rec._name_of[id(p)] for p in bucket.parameters())]
        rec._buckets[bucket.index()] = entry
    fut = dist.all_reduce(buf, group=rec._group, async_op=True).get_future()

    def done(f: torch.futures.Future) -> torch.Tensor:
        if armed:
            entry[1] = rec._now()
        return f.value()[0]

    return fut.then(done)
