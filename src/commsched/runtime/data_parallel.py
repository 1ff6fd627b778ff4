"""Apply a plan to real training: DDP semantics with the plan's buckets.

``DataParallel(module, plan)`` wraps a module like ``torch.nn.parallel.DistributedDataParallel``:

- at construction every rank checks it holds the same plan for the same model (a fingerprint of
  bucket layout, tensor names, shapes and dtypes, gathered from all ranks) and that the plan covers
  each trainable parameter exactly once; a mismatch is a :class:`CommschedError` on every rank, not a
  hang. Parameters and buffers are then broadcast from rank 0, as DDP does;
- during backward, ``register_post_accumulate_grad_hook`` copies each gradient, scaled by 1/world
  (as DDP's reducer does while copying into its buckets), into its bucket's flat buffer. Buckets are
  launched asynchronously in the plan's order (a bucket complete before its predecessor waits for
  it), because every rank must issue collectives in the same order. With ``serialize`` (the default
  on gloo) a ready bucket also waits until the previous all-reduce has completed: one at a time, as
  the simulator assumes; otherwise it is launched the moment its last gradient is in;
- at the end of backward (an autograd engine callback, as DDP uses) all all-reduces are awaited,
  under one deadline of ``timeout_s``, and the averaged gradient is copied into ``param.grad`` (a new
  tensor when it is None): never a view of a bucket, as with DDP's default
  ``gradient_as_bucket_view=False``, so a gradient the caller keeps is not changed by the next step.
  The optimizer step that follows sees world-averaged gradients.

Also handled: ``no_sync()`` for gradient accumulation, with DDP's rules: a forward outside the
context arms the step, its backward reduces (even when run inside the context, or after a no_sync
forward in between), a backward of a forward inside the context only accumulates locally, and the
next synchronised backward reduces the sum; buffers are broadcast before a forward when the
previous forward was a synchronised training one (so also before an evaluation forward); frozen parameters (not in the plan, never reduced);
parameters unused in a step: with ``find_unused_parameters=True`` (as with DDP) a rank that did not
use a parameter contributes its gradient if it has one (accumulated in no_sync micro-batches) and
zeros otherwise, a parameter no rank used since the last synchronised step keeps its ``.grad``
untouched (found by one extra all-reduce of a used-flag per parameter each step, as DDP does), and
buckets after an incomplete one wait until backward ends; with the default ``False`` an unused
parameter is a CommschedError at the end of that backward; any gradient dtype (one flat buffer per
dtype within a bucket, so fp16/bf16 gradients are reduced in their own dtype).

A backward that fails part-way (an exception in the model's backward, or a CommschedError) is
drained by the next forward, or by :meth:`DataParallel.drain`, which must come first if other
collectives are issued before that forward (on gloo, completion callbacks may still be launching
that step's buckets): every complete bucket at the front of the plan is launched and awaited (so
all ranks that failed alike have issued the same collectives, whatever the timing), and the next
step starts afresh; completion callbacks of the failed step are ignored.

Not supported, with a clear error: reentrant activation checkpointing (``use_reentrant=True``; the
non-reentrant kind works) and a second backward over one forward (after the first one's end of
backward, a further gradient raises CommschedError instead of being silently left unreduced).

Each synchronised step can be recorded (``record=True``): per-tensor ready times and per-bucket
all-reduce start/end, as a :class:`StepRecord`, convertible to the simulator's Timeline.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from commsched.errors import CommschedError
from commsched.types import Plan, Span, Timeline


@dataclass(frozen=True)
class StepRecord:
    """One synchronised step, seconds relative to the start of forward."""

    forward_end_s: float
    ready_s: tuple[float, ...]  # per tensor, in plan order (nan when unused this step)
    bucket_start_s: tuple[float, ...]
    bucket_end_s: tuple[float, ...]
    bucket_bytes: tuple[int, ...]
    step_end_s: float  # averaged gradients are back in param.grad

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


@dataclass
class _Slot:
    param: nn.Parameter
    name: str
    bucket: int
    buffer: int  # index into the bucket's per-dtype buffers
    offset: int
    numel: int


def _on_done(ref: weakref.ref, generation: int, j: int, future) -> None:
    """Completion callback of bucket j's all-reduce in step ``generation``. It holds the
    DataParallel weakly: were the communication thread to drop the last reference, the wrapper (and
    the process group's work objects) would be destroyed on the very thread they own, which aborts
    the process."""
    dp = ref()
    if dp is not None:
        dp._on_done(generation, j, future)


def trainable_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """Trainable parameters by name, shared ones once (named_parameters already dedupes)."""
    return {n: p for n, p in module.named_parameters() if p.requires_grad}


def plan_fingerprint(plan: Plan, params: dict[str, nn.Parameter]) -> str:
    layout = [[(n, list(params[n].shape), str(params[n].dtype)) for n in b.tensors] for b in plan.buckets]
    return hashlib.sha256(json.dumps(layout).encode()).hexdigest()[:16]


def check_plan_fits(plan: Plan, params: dict[str, nn.Parameter]) -> None:
    names = [n for b in plan.buckets for n in b.tensors]
    unknown = [n for n in names if n not in params]
    if unknown:
        raise CommschedError(
            f"plan {plan.strategy!r} names {len(unknown)} tensor(s) the model has no trainable parameter for, "
            f"first {unknown[0]!r}: was it made for another model?"
        )
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise CommschedError(f"plan {plan.strategy!r} lists tensor {dup!r} more than once")
    missing = [n for n in params if n not in set(names)]
    if missing:
        raise CommschedError(
            f"plan {plan.strategy!r} leaves out {len(missing)} trainable parameter(s), first {missing[0]!r}"
        )


class DataParallel(nn.Module):
    """Data-parallel training with a commsched plan's buckets (see the module docstring).

    ``timeout_s`` is one deadline for all of a step's all-reduces (and the used-flag all-reduce) at
    the end of backward, and for each set-up or drain wait: when a peer rank dies, the survivors raise
    CommschedError within about that time (or sooner, when the transport reports the broken
    connection). Give a large model on a slow network enough: every bucket must finish within it.
    """

    def __init__(
        self,
        module: nn.Module,
        plan: Plan,
        *,
        process_group: dist.ProcessGroup | None = None,
        timeout_s: float = 300.0,
        broadcast_buffers: bool = True,
        find_unused_parameters: bool = False,
        serialize: bool | None = None,
        record: bool = False,
    ) -> None:
        super().__init__()
        if not dist.is_available() or not dist.is_initialized():
            raise CommschedError("commsched.DataParallel needs torch.distributed initialised (init_process_group)")
        if not timeout_s > 0:
            raise CommschedError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.module = module
        self.plan = plan
        self.process_group = process_group
        self.timeout_s = float(timeout_s)
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        # One all-reduce at a time, as the simulator assumes: NCCL runs a communicator's collectives
        # in order on one stream anyway, but gloo runs up to two at once on its worker threads, so
        # on gloo the next bucket is launched when the previous one completes.
        self.serialize = (dist.get_backend(process_group) == "gloo") if serialize is None else serialize
        self.record = record
        self._cv = threading.Condition()
        self.world_size = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        params = trainable_parameters(module)
        self._check_same_plan_everywhere(plan, params)
        self._broadcast([p.detach() for p in module.parameters()] + list(module.buffers()))  # rank 0's state, as DDP
        self._build_buckets(plan, params)
        self._sync_enabled = True
        self._require_forward_param_sync = True  # DDP's rule for syncing buffers before a forward
        self.records: list[StepRecord] = []
        self._generation = 0
        self._used_since_sync = [False] * len(self._slots)
        self._flags_device = self._slots[0].param.device if self._slots else torch.device("cpu")
        self._reset_step()
        self._hooks = [s.param.register_post_accumulate_grad_hook(self._make_hook(i)) for i, s in enumerate(self._slots)]

    # --- set-up ------------------------------------------------------------------------------

    def _check_same_plan_everywhere(self, plan: Plan, params: dict[str, nn.Parameter]) -> None:
        """Every rank learns every rank's verdict before anyone raises, so no rank hangs."""
        try:
            check_plan_fits(plan, params)
            mine = plan_fingerprint(plan, params)
        except CommschedError as e:
            mine = f"error: {e}"
        everyone: list[str | None] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.process_group)
        errors = [(r, f) for r, f in enumerate(everyone) if f is not None and f.startswith("error: ")]
        if errors:
            r, f = errors[0]
            raise CommschedError(f"rank {self.rank}: the plan does not fit the model on rank {r}: {f[7:]}")
        if len(set(everyone)) > 1:
            groups: dict[str, list[int]] = {}
            for r, f in enumerate(everyone):
                groups.setdefault(str(f), []).append(r)
            detail = "; ".join(f"ranks {rs} have plan {f}" for f, rs in groups.items())
            raise CommschedError(f"rank {self.rank}: ranks hold different plans or models ({detail})")

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        """Broadcast from rank 0, one flat tensor per dtype and device (few collectives)."""
        groups: dict[tuple, list[torch.Tensor]] = {}
        for t in tensors:
            groups.setdefault((t.dtype, t.device), []).append(t)
        src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        for ts in groups.values():
            flat = torch._utils._flatten_dense_tensors([t.data for t in ts])
            self._wait(dist.broadcast(flat, src=src, group=self.process_group, async_op=True), "broadcast from rank 0")
            for t, v in zip(ts, torch._utils._unflatten_dense_tensors(flat, [t.data for t in ts])):
                t.data.copy_(v)

    def _build_buckets(self, plan: Plan, params: dict[str, nn.Parameter]) -> None:
        self._slots: list[_Slot] = []
        self._buffers: list[list[torch.Tensor]] = []  # per bucket, one flat buffer per (dtype, device)
        for j, bucket in enumerate(plan.buckets):
            layout: dict[tuple, int] = {}
            sizes: list[int] = []
            kinds: list[tuple] = []
            for name in bucket.tensors:
                p = params[name]
                key = (p.dtype, p.device)
                if key not in layout:
                    layout[key] = len(sizes)
                    sizes.append(0)
                    kinds.append(key)
                k = layout[key]
                self._slots.append(_Slot(p, name, j, k, sizes[k], p.numel()))
                sizes[k] += p.numel()
            self._buffers.append([torch.zeros(n, dtype=dt, device=dev) for n, (dt, dev) in zip(sizes, kinds)])
        self._bucket_sizes = [sum(1 for s in self._slots if s.bucket == j) for j in range(len(plan.buckets))]
        self._bucket_bytes = [sum(b.numel() * b.element_size() for b in bufs) for bufs in self._buffers]

    # --- per step ----------------------------------------------------------------------------

    def _reset_step(self) -> None:
        with self._cv:
            self._generation += 1  # completion callbacks of earlier steps now do nothing
        # as DDP's reducer: armed by a synchronised forward, disarmed when its backward ends; a no_sync
        # forward in between leaves it armed, and the backward of an armed step reduces
        self._armed = False
        self._finished = False  # this step's end of backward has run: a later gradient is an error
        self._written = [False] * len(self._slots)
        self._pending = list(self._bucket_sizes)
        self._next_launch = 0
        self._in_flight = 0  # works of launched buckets not yet complete (serialize mode)
        self._launching = False  # re-entrancy guard: a future already complete runs its callback inline
        self._error: BaseException | None = None  # raised on the communication thread, re-raised in _finish
        self._works: list[list] = [[] for _ in self._buffers]
        self._callback_queued = False
        self._t0 = time.perf_counter()
        self._forward_end = 0.0
        self._ready = [float("nan")] * len(self._slots)
        self._start = [0.0] * len(self._buffers)
        self._end = [0.0] * len(self._buffers)

    def _drain(self) -> None:
        """Finish what a backward that failed part-way started, so that every rank has issued the same
        collectives and none still writes into the buckets the next step fills.

        Which buckets were launched by then depends on timing (in serialize mode the next one waits
        for a completion callback), but which were complete does not, when the failure is the same
        on every rank: so every complete bucket at the front of the plan is launched and awaited.
        After a normal step all buckets are launched and complete, and this returns at once. When an
        all-reduce of that step failed (already raised), nothing more is launched; the launched ones
        are awaited and their errors dropped. The generation is then bumped: no completion callback
        of that step does anything more.
        """
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            if self._error is None:
                complete = next((j for j, p in enumerate(self._pending) if p), len(self._pending))
                self._launch_ready_buckets()  # serialize mode: completion callbacks launch the rest
                done = self._cv.wait_for(
                    lambda: self._error is not None or (self._next_launch >= complete and self._in_flight == 0),
                    max(0.0, deadline - time.monotonic()),
                )
                if not done:
                    raise CommschedError(
                        f"rank {self.rank}: the all-reduces of an earlier failed backward did not complete within "
                        f"{self.timeout_s:g} s; a peer rank has probably died"
                    )
            failed = self._error is not None
            self._generation += 1
            works = [w for ws in self._works for w in ws]
        if failed:
            for w in works:
                with contextlib.suppress(Exception):  # that step's error was raised already
                    w.wait(timedelta(seconds=max(0.001, deadline - time.monotonic())))

    def forward(self, *args, **kwargs):
        grad_enabled = torch.is_grad_enabled()  # a no_grad forward (evaluation) starts no step, as in DDP
        if grad_enabled:
            if self._sync_enabled or self._callback_queued:
                # a new synchronised step, or a backward that failed part-way before this forward
                self._drain()
                self._reset_step()
            self._finished = False
        if self.broadcast_buffers and self._require_forward_param_sync and self.world_size > 1:
            buffers = list(self.module.buffers())
            if buffers:
                self._broadcast(buffers)
        out = self.module(*args, **kwargs)
        if grad_enabled and self._sync_enabled:
            self._forward_end = time.perf_counter() - self._t0
            self._armed = True
        # DDP syncs buffers before a forward when the previous forward was a synchronised training one
        self._require_forward_param_sync = grad_enabled and self._sync_enabled
        return out

    def drain(self) -> None:
        """After catching an exception from a backward, call this before any other collective.

        On gloo the completion callbacks of that step's all-reduces may still be launching its
        remaining complete buckets; a collective issued meanwhile could be paired with one of them on
        another rank. The next forward drains anyway; this is for collectives in between.
        """
        self._drain()
        self._reset_step()

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally: a backward whose forward ran inside this context does not
        reduce, and the next synchronised one reduces the sum (as with DDP, the forward decides)."""
        old = self._sync_enabled
        self._sync_enabled = False
        try:
            yield
        finally:
            self._sync_enabled = old

    def _make_hook(self, i: int):
        def hook(param: torch.Tensor) -> None:
            if self._finished:
                raise CommschedError(
                    f"parameter {self._slots[i].name!r} got a gradient after this step's end of backward had "
                    f"already reduced the buckets: reentrant activation checkpointing (use "
                    f"torch.utils.checkpoint with use_reentrant=False) or a second backward over one forward "
                    f"is not supported"
                )
            if not self._armed:
                # remembered until the next synchronised backward: a parameter used only in no_sync
                # micro-batches still has a gradient to reduce (DDP's local_used_map does the same)
                self._used_since_sync[i] = True
                return
            self._on_ready(i, param)

        return hook

    def _on_ready(self, i: int, param: torch.Tensor) -> None:
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        if self._written[i]:
            raise CommschedError(
                f"parameter {self._slots[i].name!r} received its gradient twice in one step "
                f"(reentrant activation checkpointing, or a second backward without a new forward?)"
            )
        self._written[i] = True
        s = self._slots[i]
        if self.record:
            self._ready[i] = time.perf_counter() - self._t0
        view = self._buffers[s.bucket][s.buffer][s.offset : s.offset + s.numel]
        torch.mul(param.grad.detach().reshape(-1), 1.0 / self.world_size, out=view)  # as DDP's reducer
        with self._cv:
            self._pending[s.bucket] -= 1
            self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        """Launch ready buckets in plan order (caller holds ``self._cv``)."""
        if self._launching:
            return  # called from a callback that ran inline below: the loop below goes on
        self._launching = True
        try:
            while self._next_launch < len(self._buffers) and self._pending[self._next_launch] == 0:
                if self.serialize and self._in_flight:
                    return  # the completion callback of the bucket in flight launches the next
                j = self._next_launch
                self._next_launch += 1
                self._in_flight += len(self._buffers[j])
                self._start[j] = time.perf_counter() - self._t0
                for buf in self._buffers[j]:
                    work = dist.all_reduce(buf, group=self.process_group, async_op=True)
                    self._works[j].append(work)
                    work.get_future().then(functools.partial(_on_done, weakref.ref(self), self._generation, j))
                self._cv.notify_all()
        finally:
            self._launching = False

    def _on_done(self, generation: int, j: int, future) -> None:
        """Runs when one of bucket j's all-reduces completes: on the communication thread, or inline
        when the future was complete before ``then``. An exception here would be lost with the
        callback's own future, so it is kept for :meth:`_finish` to raise."""
        with self._cv:
            if generation != self._generation:
                return  # a step that failed and was drained
            try:
                future.value()  # raises when the all-reduce failed
                self._end[j] = time.perf_counter() - self._t0
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._launch_ready_buckets()
            except Exception as e:  # noqa: BLE001 - re-raised on the training thread
                if self._error is None:
                    self._error = e
            self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            e = self._error
            first = str(e).splitlines()[0] if str(e) else ""
            raise CommschedError(
                f"rank {self.rank}: an all-reduce failed; a peer rank has probably died ({type(e).__name__}: {first})"
            ) from e

    def _finish(self) -> None:
        """End of backward: launch what is left (unused parameters reduce zeros), wait, copy back."""
        self._finished = True
        try:
            unused = [i for i, w in enumerate(self._written) if not w]
            if unused and not self.find_unused_parameters:
                raise CommschedError(
                    f"rank {self.rank}: parameter {self._slots[unused[0]].name!r} (and {len(unused) - 1} more) got no "
                    f"gradient in this backward; if some parameters are really unused in a step, pass "
                    f"find_unused_parameters=True to DataParallel; reentrant activation checkpointing "
                    f"(use_reentrant=True) is not supported either way"
                )
            used = None
            if self.find_unused_parameters:
                flags = [w or u for w, u in zip(self._written, self._used_since_sync)]
                used = torch.tensor(flags, dtype=torch.int32, device=self._flags_device)
            with self._cv:
                for i in unused:
                    s = self._slots[i]
                    view = self._buffers[s.bucket][s.buffer][s.offset : s.offset + s.numel]
                    if s.param.grad is not None:
                        # accumulated in earlier no_sync backwards: reduced like any gradient, as
                        # DDP's reducer copies a defined gradient of a parameter unused in this pass
                        torch.mul(s.param.grad.detach().reshape(-1), 1.0 / self.world_size, out=view)
                    else:
                        view.zero_()
                    self._pending[s.bucket] -= 1
                self._launch_ready_buckets()
            deadline = time.monotonic() + self.timeout_s
            for j in range(len(self._works)):
                with self._cv:  # in serialize mode bucket j is launched when bucket j-1 completes
                    self._cv.wait_for(
                        lambda j=j: self._next_launch > j or self._error is not None,
                        max(0.0, deadline - time.monotonic()),
                    )
                    self._raise_if_failed()
                    if self._next_launch <= j:
                        raise CommschedError(
                            f"rank {self.rank}: bucket {j} was not launched within {self.timeout_s:g} s (the "
                            f"all-reduce before it never completed); a peer rank has probably died"
                        )
                for w in self._works[j]:
                    self._wait(w, f"all-reduce of bucket {j}", deadline)
            with self._cv:  # completion callbacks run on gloo's threads: let them finish before going on
                done = self._cv.wait_for(
                    lambda: self._in_flight == 0 or self._error is not None, max(0.0, deadline - time.monotonic())
                )
                self._raise_if_failed()
                if not done:
                    raise CommschedError(
                        f"rank {self.rank}: all-reduce completion callbacks did not run within {self.timeout_s:g} s"
                    )
            globally_used = None
            if used is not None:
                self._wait(dist.all_reduce(used, group=self.process_group, async_op=True), "used-parameter flags", deadline)
                globally_used = used.tolist()
            for i, s in enumerate(self._slots):
                if globally_used is not None and globally_used[i] == 0:
                    continue  # no rank used it: leave .grad as it was, as DDP does
                avg = self._buffers[s.bucket][s.buffer][s.offset : s.offset + s.numel].view_as(s.param)
                # a copy, never a view of the bucket (DDP's default gradient_as_bucket_view=False):
                # the next step overwrites the buckets, and a gradient kept by the caller must not change
                if s.param.grad is None:
                    s.param.grad = avg.clone()
                else:
                    s.param.grad.copy_(avg)
            if self.record:
                self.records.append(
                    StepRecord(
                        forward_end_s=self._forward_end,
                        ready_s=tuple(self._ready),
                        bucket_start_s=tuple(self._start),
                        bucket_end_s=tuple(max(e, s) for s, e in zip(self._start, self._end)),
                        bucket_bytes=tuple(self._bucket_bytes),
                        step_end_s=time.perf_counter() - self._t0,
                    )
                )
        finally:
            self._callback_queued = False
            self._armed = False
            self._used_since_sync = [False] * len(self._slots)

    def _wait(self, work, what: str, deadline: float | None = None) -> None:
        """Wait for ``work`` until ``deadline`` (time.monotonic), or ``timeout_s`` from now."""
        remaining = self.timeout_s if deadline is None else deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError("no time left before the deadline")
            work.wait(timedelta(seconds=remaining))
        except Exception as e:  # noqa: BLE001 - every transport error means the same here
            first = str(e).splitlines()[0] if str(e) else ""
            raise CommschedError(
                f"rank {self.rank}: {what} failed or timed out after at most {self.timeout_s:g} s; "
                f"a peer rank has probably died ({type(e).__name__}: {first})"
            ) from e

    @property
    def bucket_layout(self) -> list[list[str]]:
        """The tensor names of each bucket, in launch order (what the all-reduces really carry)."""
        return [[s.name for s in self._slots if s.bucket == j] for j in range(len(self._buffers))]
