"""Record what stock ``DistributedDataParallel`` does in each step, as the simulator's Timeline.

:class:`StepRecorder` attaches to a DDP model after construction and changes nothing DDP computes:

- DDP's reducer issues every bucket's all-reduce through its process group. The recorder hands the
  reducer (and only the reducer: ``ddp.process_group`` stays the user's) a
  :class:`RecordingGroup`, a ``ProcessGroup`` written in Python that passes the collectives the
  reducer issues (all-reduce, broadcast; all-gather and barrier too) to the real group and, for
  each floating-point all-reduce, stamps its launch and, in a callback chained to the all-reduce's
  future, its end; the work it returns to DDP completes after that callback, so DDP's wait for the
  buckets comes after every end stamp. The reducer launches buckets in index order the moment a
  bucket and every bucket before it are ready; the all-reduce may then wait in gloo's queue, so
  the stamp is the launch, not the start of execution. DDP keeps its own comm path (no comm hook):
  it still scales gradients by 1/world while copying them into its buckets, so the recorder adds no
  pass over them and the gradients are stock DDP's bit for bit (the tests compare them). Integer
  all-reduces (the unused-parameter map of ``find_unused_parameters=True``) and broadcasts pass
  through unrecorded.
- ``register_post_accumulate_grad_hook`` on every trainable parameter stamps when its gradient is
  ready (the moment DDP's own hook on the same accumulator marks it ready);
- forward pre- and post-hooks on the DDP module stamp the step's start and the end of forward;
- an autograd engine callback closes the step after DDP's own end-of-backward callback (which waits
  for every bucket and copies the averaged gradients back). DDP queues that one once its last
  bucket is launched; the engine runs callbacks in the order queued, including those queued by a
  running callback. So the first bucket's launch queues a callback that queues the closing one,
  which then lands behind DDP's. After its last stamp it reads the bucket layout from the reducer
  when DDP has (re)built its buckets (``_get_zeros_like_grad_buckets``: twice in a run, in the
  first step and in the one after the rebuild).

A step is recorded when its forward ran with gradients enabled outside ``no_sync()`` (the steps
that reduce). Times are seconds since the start of that forward. On CUDA, host stamps of NCCL
work would be enqueue times: there the recorder records CUDA events instead (run on one H200 with one
NCCL rank by make gpu-check, see docs/gpu.md).

The cost: one Python call per gradient and per collective (and one on the communication thread per
bucket, for its end stamp), and the bucket layout read twice per run. :attr:`StepRecorder.own_s` adds up the time spent inside the recorder's own calls, a direct
measurement of what it takes from the step; BENCHMARKS.md measures the whole against stock DDP
without a recorder. The reducer's private ``_update_process_group`` (torch >= 2.1),
``_get_zeros_like_grad_buckets`` and ``_create_work_from_future`` are the non-public calls this
relies on. A DDP with a comm hook (Python or built-in) is refused.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from commsched.errors import CommschedError
from commsched.types import Span, Timeline


@dataclass(frozen=True)
class StepRecord:
    """One synchronised step, seconds relative to the start of forward.

    ``ready_s`` is per tensor in ``tensor_names`` order (nan when the tensor got no gradient this
    step); buckets are in launch order (DDP's bucket index), with the tensors each carried.
    ``forward_end_s`` is nan for a step whose forward end was not stamped (the step during which a
    recorder was attached, inside its forward: the tuner drops that record).
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
        comm = union_of(list(zip(self.bucket_start_s, self.bucket_end_s)))
        comm_total = sum(e - s for s, e in comm)
        overlap = sum(max(0.0, min(e, compute[1]) - max(s, compute[0])) for s, e in comm)
        return {
            "computation_only_s": compute[1] - compute[0] - overlap,
            "communication_only_s": comm_total - overlap,
            "overlap_s": overlap,
        }


def union_of(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The disjoint intervals that cover exactly what ``intervals`` cover, in order."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


class RecordingGroup(dist.ProcessGroup):
    """A process group that passes every collective to ``inner`` and tells ``recorder`` (held
    weakly) of each floating-point all-reduce: the reducer's buckets (module docstring).

    Its methods are never traced by ``torch.compile``: DDP's forward calls ``broadcast`` (the bucket
    rebuild, the buffers) inside a compiled model's call, and a process group's collectives are
    not graph operations."""

    def __init__(self, inner: dist.ProcessGroup, recorder: StepRecorder) -> None:
        super().__init__(inner.rank(), inner.size())
        self.inner = inner
        self._recorder = weakref.ref(recorder)
        self.allreduces = 0  # every all-reduce passed on (recorded or not)

    @torch._disable_dynamo
    def getBackendName(self) -> str:  # noqa: N802 - the ProcessGroup method's name
        return self.inner.name()

    @torch._disable_dynamo
    def allreduce(self, tensors, opts=None):
        self.allreduces += 1
        rec = self._recorder()
        if rec is None or not rec._armed or not (tensors[0].is_floating_point() or tensors[0].is_complex()):
            return self.inner.allreduce(tensors, opts if opts is not None else dist.AllreduceOptions())
        t = time.perf_counter()
        start = rec._now()
        own = time.perf_counter() - t
        work = self.inner.allreduce(tensors, opts if opts is not None else dist.AllreduceOptions())
        t = time.perf_counter()
        stamped = rec._launched(start, tensors[0], work)
        rec.own_s += own + time.perf_counter() - t
        return stamped

    @torch._disable_dynamo
    def broadcast(self, tensors, opts=None):
        return self.inner.broadcast(tensors, opts if opts is not None else dist.BroadcastOptions())

    @torch._disable_dynamo
    def allgather(self, output_tensors, input_tensors, opts=None):
        return self.inner.allgather(output_tensors, input_tensors, opts if opts is not None else dist.AllgatherOptions())

    @torch._disable_dynamo
    def barrier(self, opts=None):
        return self.inner.barrier(opts if opts is not None else dist.BarrierOptions())


class StepRecorder:
    """Records every reducing step of a DDP model (see the module docstring); ``records`` holds them.

    Attach it before the first step or between steps, never inside one. ``order`` fixes the order of
    ``ready_s`` (default: the order in which gradients became ready in the first recorded step).
    ``own_s`` adds up the time spent inside the recorder's calls on the training thread since it was
    attached (seconds, this rank; the end stamps run on the communication thread and are left out).
    A DDP with a comm hook is refused; registering one while a recorder is attached is not supported
    (a Python hook bypasses the recording group, so nothing is recorded; a built-in one captures it).
    """

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, order: tuple[str, ...] | None = None) -> None:
        if getattr(ddp, "_commsched_recorder", None) is not None:
            raise CommschedError("this DistributedDataParallel already has a StepRecorder: remove() it first")
        if getattr(ddp, "_comm_hooks", None) or ddp._get_ddp_logging_data().get("comm_hook"):
            raise CommschedError(
                "this DistributedDataParallel has a comm hook, which issues the all-reduces instead of DDP's "
                "reducer: StepRecorder records the reducer's own all-reduces (stock DDP without a hook)"
            )
        self._ddp = weakref.ref(ddp)  # DDP holds this recorder (_commsched_recorder): weakly back
        self._records: list[StepRecord] = []
        self._pending: list[tuple] = []  # closed steps not yet made StepRecords (see _close)
        # every parameter by name: DDP's buckets hold those trainable when it was built, which a
        # frozen half of the model (requires_grad off for a while) need not be now
        self._name_of = {id(p): n for n, p in ddp.module.named_parameters()}
        self._order = tuple(order) if order is not None else None
        self._cuda = next(iter(ddp.module.parameters())).is_cuda
        self._armed = False
        self._layout: list[tuple[str, ...]] | None = None  # names per DDP bucket, read from the reducer
        self._layout_rebuilt: bool | None = None  # DDP's _has_rebuilt_buckets when it was read
        self.own_s = 0.0
        self._reset()
        self.group: RecordingGroup | None = None
        self._handles: list = []
        self._attach(ddp)
        ddp._commsched_recorder = self

    def _attach(self, ddp: nn.parallel.DistributedDataParallel) -> None:
        # the parameters are not kept: their hooks hold this recorder, and a reference back through
        # tensor hooks is a cycle Python's collector cannot see
        self._handles = [
            p.register_post_accumulate_grad_hook(self._make_ready_hook(n))
            for n, p in ddp.module.named_parameters()
            if p.requires_grad
        ]
        self._handles.append(ddp.register_forward_pre_hook(self._on_forward_start))
        self._handles.append(ddp.register_forward_hook(self._on_forward_end))
        # only the reducer's pointer: the Python side keeps the user's group (which is what the
        # reducer gets back), and the reducer keeps its buckets and state
        # (ddp._update_process_group would also reset them)
        self.group = RecordingGroup(ddp.process_group, self)
        ddp.reducer._update_process_group(self.group)

    def _detach(self) -> nn.parallel.DistributedDataParallel | None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._armed = False
        ddp = self._ddp()
        if ddp is not None:
            ddp.reducer._update_process_group(ddp.process_group)
        return ddp

    # --- per step -------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._t0 = 0.0
        # None until the forward hook stamps it: a recorder attached inside a forward (the tuner's)
        # misses that step's forward end (a module call that began with no hooks runs none: the
        # fast path of Module._call_impl)
        self._forward_end = None
        self._ready: dict[str, float] = {}
        self._buckets: list[list] = []  # per launch: [start, end, bytes]
        self._closing = False

    def _now(self):
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    @torch._disable_dynamo  # called inside a compiled model's call (the DDP's hooks): never traced
    def _on_forward_start(self, module, _args) -> None:
        t = time.perf_counter()
        self._armed = torch.is_grad_enabled() and module.require_backward_grad_sync
        if self._armed:
            self._reset()
            self._t0 = self._now()
        self.own_s += time.perf_counter() - t

    @torch._disable_dynamo
    def _on_forward_end(self, _module, _args, _out) -> None:
        t = time.perf_counter()
        if self._armed:
            self._forward_end = self._now()
        self.own_s += time.perf_counter() - t

    def _make_ready_hook(self, name: str):
        def hook(_param: torch.Tensor) -> None:
            t = time.perf_counter()
            if self._armed and name not in self._ready:
                self._ready[name] = self._now()
            self.own_s += time.perf_counter() - t

        return hook

    def _launched(self, start, tensor: torch.Tensor, work):
        """A bucket's all-reduce was launched at ``start`` (called by :class:`RecordingGroup`): the
        work DDP gets back completes once its end is stamped, so DDP's end-of-backward wait (and
        hence the step's close) comes after every stamp."""
        entry = [start, None, tensor.numel() * tensor.element_size()]
        self._buckets.append(entry)
        if not self._closing:
            self._closing = True
            torch.autograd.Variable._execution_engine.queue_callback(self._close_after_ddp)

        def done(f: torch.futures.Future):
            entry[1] = self._now()  # on the communication thread, as the all-reduce completes
            return f.value()

        return _work_from_future(work.get_future().then(done))

    def _close_after_ddp(self) -> None:
        torch.autograd.Variable._execution_engine.queue_callback(self._close)

    def _close(self) -> None:
        """End of backward, after DDP's own finalisation (see the module docstring). The step is
        kept raw and becomes a StepRecord when ``records`` is read (on CUDA that synchronises)."""
        end = self._now()
        t = time.perf_counter()
        ddp = self._ddp()
        # DDP (re)builds its buckets in the forward of the step after the first: the layout this
        # step reduced is read when it may have changed, after the step's last stamp
        rebuilt = bool(getattr(ddp, "_has_rebuilt_buckets", False))
        if ddp is not None and (self._layout is None or rebuilt != self._layout_rebuilt):
            self._layout = [tuple(self._name_of[id(p)] for p in b.parameters()) for b in ddp.reducer._get_zeros_like_grad_buckets()]
            self._layout_rebuilt = rebuilt
        self._pending.append((self._t0, self._forward_end, self._ready, self._buckets, end, self._layout or []))
        self._armed = False
        self.own_s += time.perf_counter() - t

    @property
    def records(self) -> list[StepRecord]:
        """The recorded steps, oldest first (the list itself: clearing it forgets them)."""
        if self._pending:
            if self._cuda:
                torch.cuda.synchronize()  # CUDA events are read here, not inside the step
            pending, self._pending = self._pending, []
            self._records.extend(self._record(*p) for p in pending)
        return self._records

    def _record(self, t0, forward_end, ready_at: dict, buckets: list, end, layout: list) -> StepRecord:
        if self._cuda:
            def rel(stamp) -> float:
                return t0.elapsed_time(stamp) / 1e3
        else:
            def rel(stamp) -> float:
                return stamp - t0
        ready = {n: rel(t) for n, t in ready_at.items()}
        if self._order is None:
            self._order = tuple(sorted(ready, key=ready.get))  # first step: the ready order
        return StepRecord(
            forward_end_s=rel(forward_end) if forward_end is not None else float("nan"),
            ready_s=tuple(ready.get(n, float("nan")) for n in self._order),
            bucket_start_s=tuple(rel(e[0]) for e in buckets),
            bucket_end_s=tuple(rel(e[1]) if e[1] is not None else float("nan") for e in buckets),
            bucket_bytes=tuple(e[2] for e in buckets),
            step_end_s=rel(end),
            tensor_names=self._order,
            bucket_tensors=tuple(layout[j] if j < len(layout) else () for j in range(len(buckets))),
        )

    def pause(self) -> None:
        """Stop recording for now, between steps: hooks off, the reducer's own group back (the DDP
        model runs exactly as without a recorder); :meth:`resume` starts again, the layout known."""
        if self._handles:
            self._detach()

    def resume(self) -> None:
        ddp = self._ddp()
        if ddp is None or getattr(ddp, "_commsched_recorder", None) is not self:
            raise CommschedError("this StepRecorder was removed (or its model is gone): attach a new one")
        if not self._handles:
            self._attach(ddp)

    def remove(self) -> None:
        """Stop recording for good: the hooks go and the reducer gets its own process group back."""
        ddp = self._detach()
        if ddp is not None:
            ddp._commsched_recorder = None


def _work_from_future(future: torch.futures.Future):
    """A ``Work`` whose completion is ``future``'s (torch's private constructor, which its own tests
    of process groups written in Python use)."""
    return torch._C._distributed_c10d._create_work_from_future(future)
