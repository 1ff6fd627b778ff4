"""Stock ``DistributedDataParallel``'s bucketing, in one place: the ``ddp`` planner (stock DDP's
default buckets), DDP's bucket assignment (:func:`assign`, the one rule both use) and the bucket caps
that make DDP reduce exactly a plan's buckets. Pure: no torch (``commsched plan --out`` writes the caps).

DDP's defaults: the first bucket's limit is ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB),
every later one ``bucket_cap_mb`` (default 25, in MiB); given ``bucket_cap_mb`` explicitly, torch 2.14
uses it for the first bucket too (``BucketCapacityConfig``), as :func:`ddp_with_cap` does.

What torch 2.14 does (``_BucketCapacityConfig`` in ``torch/nn/parallel/distributed.py``, the C++
``_compute_bucket_assignment_by_size`` and the reducer's bucket rebuild; each point is checked against
torch itself by ``tests/distributed/test_ddp_buckets.py`` and ``tests/unit/test_ddp_buckets.py``):

- ``bucket_cap_mb_list=[c0, c1, ...]`` gives bucket k the cap ``int(c_k * 2**20)`` bytes; the last cap
  repeats for every later bucket.
- The assignment walks the tensors in a given order, keeps one open bucket per dtype (and device),
  adds each tensor to its dtype's bucket and closes that bucket as soon as its size is **>=** the
  dtype's current cap; each dtype consumes the cap list on its own, from ``c0``. Buckets still open
  at the end are closed there (with several dtypes torch orders those last few in no specified way).
- Iteration 0 uses that assignment over the parameters in definition order
  (``module.parameters()``), reversed. After the first backward, DDP rebuilds its buckets with the
  same caps over the order in which gradients became ready in iteration 0 (rank 0's order, which
  every rank adopts) and keeps them: so from iteration 1 on the buckets are contiguous runs in ready
  order, which is what a plan is. The rebuild does not happen with ``find_unused_parameters=True``
  (unless ``static_graph=True``): then the iteration-0 buckets stay for good.

So a plan bucket of B bytes gets the cap B: its tensors before the last sum to less than B (every
tensor has at least one byte) and with the last they reach B. MiB values are ``B / 2**20``, exact in
binary floating point for every B below 2**53, so ``int(c * 2**20) == B`` again.

With several dtypes each dtype's buckets consume the caps on their own, so bucket k of every dtype
shares cap k (:func:`caps_for` intersects what each needs). A plan is *not* expressible when one of
its buckets mixes dtypes (DDP never does), when those intersections are empty, or, with
``find_unused_parameters=True``, when its buckets are not contiguous runs of the parameters in
definition order; :func:`assign` says what DDP will do instead, and :func:`express` by how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.types import MAX_BYTES, ModelProfile, Plan

MIB = 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """What DDP's assignment looks at: a gradient tensor's name, bytes and dtype (e.g. 'float32')."""

    name: str
    bytes: int
    dtype: str = "float32"


def caps_bytes(plan: Plan) -> tuple[int, ...]:
    """Per-bucket caps (bytes) under which DDP's rebuilt buckets are the plan's, for one dtype."""
    return tuple(b.bytes for b in plan.buckets)


def cap_mb_list(caps: Sequence[int]) -> list[float]:
    """``bucket_cap_mb_list`` values for byte caps (exact: see the module docstring)."""
    out = []
    for c in caps:
        if isinstance(c, bool) or not isinstance(c, int) or not 0 < c < 2**53:
            raise CommschedError(f"a DDP bucket cap must be a whole number of bytes in (0, 2**53), got {c!r}")
        out.append(c / MIB)
    return out


def assign(tensors: Sequence[TensorInfo], caps: Sequence[int], by_first_index: bool = False) -> tuple[tuple[str, ...], ...]:
    """DDP's bucket assignment of ``tensors`` (in the order given) under per-bucket ``caps`` (bytes).

    Buckets come out in the order they are closed, as the rebuild (which passes the ready order)
    gets them; those still open at the end (one per dtype at most) follow in the order their dtype
    first appeared: torch emits that tail from a hash map, in an order it does not specify, so with
    one dtype there is one such bucket and the order is exact. ``by_first_index`` sorts the buckets
    by the position of their first tensor instead, as torch does when it is given no order (the
    iteration-0 assignment over the definition order).
    """
    if not caps:
        raise CommschedError("DDP bucket caps must not be empty")
    position = {t.name: i for i, t in enumerate(tensors)}
    open_: dict[str, tuple[list[str], int, int]] = {}  # dtype -> (names, bytes, index of its cap)
    out: list[tuple[str, ...]] = []
    for t in tensors:
        names, size, k = open_.get(t.dtype, ([], 0, 0))
        names.append(t.name)
        size += t.bytes
        if size >= caps[min(k, len(caps) - 1)]:
            out.append(tuple(names))
            open_[t.dtype] = ([], 0, k + 1)
        else:
            open_[t.dtype] = (names, size, k)
    out += [tuple(names) for names, _, _ in open_.values() if names]
    if by_first_index:
        out.sort(key=lambda b: position[b[0]])
    return tuple(out)


@dataclass(frozen=True)
class Expression:
    """How closely stock DDP can reduce a plan's buckets.

    ``caps`` are the ``bucket_cap_mb_list`` caps in bytes; ``buckets`` what DDP reduces with them
    after its rebuild (or for good, with ``find_unused_parameters=True``), in launch order;
    ``exact`` whether that is the plan; otherwise ``moved_bytes`` counts the gradient bytes outside
    the plan bucket each of DDP's buckets overlaps most (each plan bucket matched once, greedily by
    size: an upper bound on the bytes that would have to move) and ``reason`` says why.
    """

    caps: tuple[int, ...]
    buckets: tuple[tuple[str, ...], ...]
    exact: bool
    moved_bytes: int
    reason: str = ""

    def kwargs(self) -> dict:
        return {"bucket_cap_mb_list": cap_mb_list(self.caps)}


def caps_for(buckets: Sequence[Sequence[TensorInfo]]) -> tuple[tuple[int, ...], str]:
    """Caps under which DDP's assignment (each dtype consuming the caps on its own) closes every
    bucket of ``buckets`` (in walk order, each of one dtype) at its last tensor, and a reason when
    none exist.

    Bucket k of each dtype needs cap k in (its bytes before its last tensor, its bytes]; for a
    dtype's last bucket the upper end may be open (a bucket still open at the end is closed there).
    The caps are intersections over dtypes; a bucket that mixes dtypes, or an empty intersection,
    cannot be expressed (the caps then follow the first dtype's buckets and ``reason`` says why).
    """
    per_dtype: dict[str, list[tuple[int, int]]] = {}  # dtype -> [(bytes before last, bytes)]
    reason = ""
    for b in buckets:
        dtypes = {t.dtype for t in b}
        if len(dtypes) > 1:
            reason = reason or f"a bucket mixes dtypes ({', '.join(sorted(dtypes))}); DDP buckets each dtype apart"
        total = sum(t.bytes for t in b)
        per_dtype.setdefault(b[-1].dtype, []).append((total - b[-1].bytes, total))
    width = max(len(v) for v in per_dtype.values())
    caps = []
    for k in range(width):
        lo, hi = 0, math.inf
        for bs in per_dtype.values():
            if k < len(bs):
                before, total = bs[k]
                lo = max(lo, before)
                hi = min(hi, total if k < len(bs) - 1 else math.inf)
        closing = [bs[k][1] for bs in per_dtype.values() if k < len(bs)]
        # close last buckets too where the interval allows (their order at the end is unspecified)
        pick = min([c for c in closing if lo < c <= hi], default=None)
        if pick is None:
            if hi == math.inf:
                pick = lo + 1
            else:
                reason = reason or f"the dtypes' bucket {k} sizes need a cap in ({lo}, {hi}] that no whole byte count meets"
                pick = max(lo + 1, min(closing))
        caps.append(int(pick))
    return tuple(caps), reason


def express(plan: Plan, tensors: Sequence[TensorInfo] | None = None, definition_order: Sequence[str] | None = None) -> Expression:
    """The caps for ``plan`` and what DDP does with them.

    ``tensors`` (the model's gradient tensors, any order) give per-tensor bytes and dtypes; without
    them one dtype is assumed and the plan is exact by construction (caps = bucket sizes). With
    several dtypes each dtype's buckets consume the caps on their own (:func:`caps_for`).
    ``definition_order`` (the trainable parameters' names in ``module.parameters()`` order) asks for
    the layout DDP keeps with ``find_unused_parameters=True``: the assignment over the definition
    order, buckets reversed; the caps are then taken along the definition order.
    """
    if tensors is None:
        if definition_order is not None:
            raise CommschedError("express() needs the tensors' sizes to follow the definition order")
        return Expression(caps_bytes(plan), tuple(b.tensors for b in plan.buckets), True, 0)
    info = {t.name: t for t in tensors}
    missing = [n for n in plan.tensor_order if n not in info]
    if missing:
        raise CommschedError(f"plan {plan.strategy!r} names tensor {missing[0]!r}, which the model has no trainable parameter for")
    if definition_order is None:
        caps, reason = caps_for([[info[n] for n in b.tensors] for b in plan.buckets])
        got = assign([info[n] for n in plan.tensor_order], caps)
        return _compare(plan, caps, got, info, reason or "DDP's assignment differs")
    # along the definition order: the plan's buckets as runs of it, in that order
    walk = [n for n in definition_order if n in info]
    bucket_of = {n: j for j, b in enumerate(plan.buckets) for n in b.tensors}
    runs: list[list[TensorInfo]] = []
    last = None
    for n in walk:
        if n in bucket_of and bucket_of[n] == last:
            runs[-1].append(info[n])
        else:
            runs.append([info[n]])
            last = bucket_of.get(n)
    caps, reason = caps_for(runs)
    realised = assign([info[n] for n in walk], caps, by_first_index=True)
    got = tuple(tuple(reversed(b)) for b in reversed(realised))
    return _compare(
        plan, caps, got, info,
        reason or "with find_unused_parameters=True DDP keeps its first buckets (runs of the definition order, reversed)",
    )


def _compare(plan: Plan, caps, got, info, why: str) -> Expression:
    want = [set(b.tensors) for b in plan.buckets]
    exact = len(got) == len(want) and all(set(g) == w for g, w in zip(got, want))
    if exact:
        return Expression(tuple(caps), got, True, 0)
    if sorted(map(sorted, got)) == sorted(map(sorted, want)):
        return Expression(tuple(caps), got, False, 0, "the plan's buckets, launched in another order (each dtype's as they close)")
    kept, used = 0, set()
    for g in sorted(got, key=lambda g: -sum(info[n].bytes for n in g)):
        best = max(
            ((sum(info[n].bytes for n in g if n in w), j) for j, w in enumerate(want) if j not in used),
            default=(0, -1),
        )
        if best[1] >= 0:
            used.add(best[1])
            kept += best[0]
    total = sum(info[n].bytes for b in plan.buckets for n in b.tensors)
    return Expression(tuple(caps), got, False, total - kept, why)


DDP_OPTIONS_SCHEMA = "commsched.ddp_options/v1"


def ddp_options_doc(plan: Plan) -> dict:
    """``ddp_options.json`` (schema ``commsched.ddp_options/v1``): the stock-DDP keyword arguments
    that reduce ``plan``'s buckets, for one gradient dtype, with the bucket sizes they stand for."""
    e = express(plan)
    return {
        "schema": DDP_OPTIONS_SCHEMA,
        "strategy": plan.strategy,
        "model": plan.model,
        "kwargs": e.kwargs(),
        "bucket_bytes": list(e.caps),
        "note": (
            "DistributedDataParallel(model, **kwargs) reduces exactly these buckets from the step after its "
            "bucket rebuild (iteration 1 on); iteration 0 lays the same caps over the parameters in definition "
            "order. Exact for one gradient dtype; commsched.ddp_options(plan, model) checks the model and "
            "warns where DDP cannot express a plan (mixed dtypes, find_unused_parameters=True)."
            + (
                " The plan also gives its buckets NCCL resources (blocks x threads per block); these options do "
                "not apply them: every all-reduce runs with the library's default unless you also register "
                "commsched.runtime.resource_hook (resource_routing(plan, model), resource_hook), which applies "
                "each bucket's blocks on NCCL (threads per block are one process-wide NCCL_NTHREADS)."
                if any(b.resources is not None for b in plan.buckets)
                else ""
            )
        ),
    }


# --- the planner: stock DDP's default buckets ----------------------------------------------


@dataclass(frozen=True)
class DDP:
    cap_bytes: int = 25 * MIB
    first_bucket_bytes: int = 1 * MIB
    name: str = "ddp"

    def __post_init__(self) -> None:
        for what in ("cap_bytes", "first_bucket_bytes"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_BYTES:
                raise CommschedError(f"ddp {what} must be a whole number of bytes in (0, 2**50], got {v!r}")

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        """DDP's rebuilt buckets over the ready order (:func:`assign` with caps first, cap, cap, ...)."""
        buckets = assign([TensorInfo(t.name, t.bytes) for t in profile.tensors], (self.first_bucket_bytes, self.cap_bytes))
        ends, n = [], 0
        for b in buckets:
            n += len(b)
            ends.append(n)
        return tuple(ends)


def ddp_with_cap(bucket_mb: float) -> DDP:
    """DDP(bucket_cap_mb=X) as torch 2.14 builds it: every bucket, the first included, capped at X MiB."""
    if not (isinstance(bucket_mb, (int, float)) and math.isfinite(bucket_mb) and bucket_mb > 0):
        raise CommschedError(f"bucket cap must be a finite number > 0 of MiB, got {bucket_mb!r}")
    cap = max(1, int(bucket_mb * MIB))
    return DDP(cap_bytes=cap, first_bucket_bytes=cap)
