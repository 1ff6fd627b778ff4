"""The model of an iteration from a user's own training steps: what tuning inside a job plans with.

:class:`commsched.runtime.tune.Tuner` records a few of the job's own stock DDP steps
(:class:`~commsched.runtime.record.StepRecorder`), times every step from one forward to the next,
and runs a handful of small all-reduces on the job's process group. From those numbers alone
(nothing here repeats a training step) this module makes:

- the compute profile (:func:`profile_of_steps`): :class:`~commsched.calibrate.profile_steps.ProfileSteps`,
  the same combination ``validate`` uses, over the recorded steps; the time from the end of a step's
  backward to the next forward (the optimizer, the data loader, the user's own code) is its
  ``optimizer_s``, so the profile's iteration is the job's whole step;
- the all-reduce cost and how much slower an all-reduce goes while backward compute runs
  (:func:`fit_cost`): each bucket's service time in DDP's FIFO (from its launch, or from the end of
  the bucket before it if that was later, to its end) and how much of it overlapped the backward
  pass, pooled with the probes (chains of small all-reduces, no overlap). An all-reduce of M bytes
  needs T(M) seconds alone and progresses at 1 / (1 + m) of that rate while backward compute runs
  (``comm_slowdown`` of :mod:`commsched.sim.semantics`), so a bucket's service time is
  T(M) + overlap x m / (1 + m). m comes from a line T(M) = alpha + beta M (MG-WFBP Eq. 2,
  docs/design.md "cost models") fitted where all-reduces move data; T itself is a non-decreasing
  ``table`` of per-call medians, as ``validate`` makes its cost (docs/design.md, "Tuning inside the
  job", says why not the line).

The backward pass was measured with the job's own buckets in flight, so the profile carries their
contention; the semantics is a FIFO of one all-reduce at a time (:func:`semantics_for`), the
assumption under which the service times were taken. What this model cannot see (what a different
number of buckets costs the backward pass; ``validate``'s launch passes measure it) is why tuning
keeps a plan only after measuring it.
Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from commsched.calibrate.profile_steps import ProfileSteps
from commsched.cost.fit import nondecreasing_points
from commsched.cost.models import CostModel, Table
from commsched.errors import CommschedError
from commsched.sim.semantics import Semantics
from commsched.types import MAX_SECONDS, ModelProfile, TensorSpec


class Record(Protocol):
    """What is read of a :class:`~commsched.runtime.record.StepRecord` (seconds from the step's forward)."""

    forward_end_s: float
    ready_s: tuple[float, ...]
    bucket_start_s: tuple[float, ...]
    bucket_end_s: tuple[float, ...]
    bucket_bytes: tuple[int, ...]
    step_end_s: float
    tensor_names: tuple[str, ...]


@dataclass(frozen=True)
class InJobModel:
    """The profile and cost fitted from a job's own steps, and how well the cost fits its points."""

    profile: ModelProfile
    cost: CostModel
    cost_kind: str  # "alpha-beta" or "table"
    points: tuple[Busy, ...]  # what the cost was fitted to
    max_abs_rel_error: float  # of the service times predicted at the points
    unused: tuple[str, ...]  # tensors that got no gradient in any recorded step
    comm_slowdown: float = 0.0  # m: all-reduces go at 1 / (1 + m) while backward compute runs

    def to_json(self) -> dict:
        return {
            "cost": self.cost.to_json(),
            "cost_kind": self.cost_kind,
            "comm_slowdown": self.comm_slowdown,
            "points": [[p.calls, p.bytes, p.seconds, p.under_compute_s] for p in self.points],
            "max_abs_rel_error": self.max_abs_rel_error,
            "unused": list(self.unused),
        }


def profile_of_steps(
    records: Sequence[Record], periods_s: Sequence[float], sizes: dict[str, int], model: str, batch_size: int = 1
) -> tuple[ModelProfile, tuple[str, ...]]:
    """(the profile, the tensors without a gradient in any step) from recorded steps and each step's
    period (its forward to the next forward, seconds). ``sizes``: bytes per tensor name.

    Tensors are ordered by their median ready time; each step's ``optimizer_s`` is its period less its
    end of backward (DDP's copy back of the gradients is ``finalize_s``, as in ``validate``)."""
    if not records:
        raise CommschedError("no recorded steps to make a profile of")
    if len(periods_s) != len(records):
        raise CommschedError(f"{len(records)} recorded steps but {len(periods_s)} step periods")
    names = records[0].tensor_names
    for r in records:
        if r.tensor_names != names:
            raise CommschedError("the recorded steps name their tensors in different orders")
    ready_by_tensor = {n: [r.ready_s[i] for r in records if not math.isnan(r.ready_s[i])] for i, n in enumerate(names)}
    unused = tuple(n for n, v in ready_by_tensor.items() if not v)
    used = [n for n in names if ready_by_tensor[n]]
    if not used:
        raise CommschedError("no tensor got a gradient in the recorded steps")
    used.sort(key=lambda n: statistics.median(ready_by_tensor[n]))
    index = {n: i for i, n in enumerate(names)}
    first = min(min(v) for v in ready_by_tensor.values() if v)
    order = ModelProfile(
        model=model, batch_size=batch_size, device="measured in the job", source="measured", forward_s=1.0,  # names and bytes only: replaced below
        tensors=tuple(TensorSpec(n, sizes[n], 0.0) for n in used),
    )
    steps = []
    for r, period in zip(records, periods_s):
        # a tensor without a gradient in this step (but in others) counts as ready at the step's first gradient
        ready = tuple(r.ready_s[index[n]] if not math.isnan(r.ready_s[index[n]]) else first for n in used)
        step = _Step(r.forward_end_s, ready, tuple(e for e in r.bucket_end_s if not math.isnan(e)), r.step_end_s)
        steps.append((step, max(0.0, period - r.step_end_s)))
    profile = ProfileSteps.of(order, [steps]).profile()
    return profile, unused


@dataclass(frozen=True)
class _Step:
    """What :class:`~commsched.calibrate.profile_steps.ProfileSteps` reads of a step, ready times reordered."""

    forward_end_s: float
    ready_s: tuple[float, ...]
    bucket_end_s: tuple[float, ...]
    step_end_s: float


@dataclass(frozen=True)
class Busy:
    """A stretch of the link's time: ``calls`` all-reduces of ``bytes`` in all that ran back to back or
    at once (gloo runs up to its thread count together), ``seconds`` from the first one's start of
    service to the last one's end, ``under_compute_s`` of it while backward compute ran."""

    calls: int
    bytes: int
    seconds: float
    under_compute_s: float = 0.0


def service_times(records: Sequence[Record]) -> list[Busy]:
    """The busy stretches of every recorded step (:class:`Busy`): the times when at least one bucket
    was in flight (launched, not ended), each with the buckets in it. Buckets in flight together
    are one stretch: one waited for the other (NCCL's stream), or they shared the link (gloo's
    threads), so which of them took which part of it cannot be told. Backward compute runs from the
    end of forward to the last gradient. Buckets without an end stamp are left out."""
    out: list[Busy] = []
    for r in records:
        ready = [t for t in r.ready_s if not math.isnan(t)]
        compute_end = max(ready) if ready else r.forward_end_s
        spans = [(s, e, int(b)) for s, e, b in zip(r.bucket_start_s, r.bucket_end_s, r.bucket_bytes) if not math.isnan(e) and b > 0]
        group: list[tuple[float, float, int]] = []
        for span in sorted(spans) + [None]:  # type: ignore[list-item]
            if span is not None and group and span[0] < max(e for _, e, _ in group):
                group.append(span)
                continue
            if group:
                start, end = group[0][0], max(e for _, e, _ in group)
                if end > start:
                    overlap = max(0.0, min(end, compute_end) - max(start, r.forward_end_s))
                    out.append(Busy(len(group), sum(b for _, _, b in group), end - start, overlap))
            group = [span] if span is not None else []
    return out


SLOWDOWN_GRID = tuple(k / 20 for k in range(0, 61))  # m from 0 to 3 in steps of 0.05
_IRLS_ITERATIONS = 30
_IRLS_FLOOR = 1e-4  # relative residuals below this count as this (keeps the weights finite)


def _l1_relative_line(a: np.ndarray, y: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
    """(x, sum |a x - y| / t): least absolute *relative* deviations by iteratively reweighted least
    squares. Relative, because the points span 1 MiB probes (a few milliseconds) and 25 MB buckets
    (tens of ms): absolute squares let the big buckets' noise set the per-call cost. Absolute
    deviations, because small all-reduces are bimodal on some links (most take a fraction of a ms,
    some wait for a wake-up of several: docs/limitations.md), and squares let those few set it."""
    w = 1.0 / t**2
    x = np.zeros(a.shape[1])
    for _ in range(_IRLS_ITERATIONS):
        sw = np.sqrt(w)
        x, *_ = np.linalg.lstsq(a * sw[:, None], y * sw, rcond=None)
        rel = np.maximum(np.abs(a @ x - y) / t, _IRLS_FLOOR)
        w = 1.0 / (t**2 * rel)
    return x, float(np.sum(np.abs(a @ x - y) / t))


LINE_MIN_BYTES = 1 << 20  # the slowdown under compute is fitted where all-reduces move data (below)


def fit_cost(samples: Sequence[Busy]) -> tuple[CostModel, str, float, float]:
    """(the cost of one all-reduce alone, its kind, its largest relative error in busy time, m):
    module docstring.

    Two steps, because one line does not fit both ends of the sizes a job meets: on this project's
    emulated links small all-reduces back to back take a wake-up of a few ms each whatever their
    size (16 KiB and 256 KiB alike), while from about 1 MiB on the time is the bytes over the
    bandwidth (BENCHMARKS.md section 11; ``validate``'s cost table for the same reason,
    :mod:`commsched.calibrate.cost_table`). First m: for each m of the grid a line n alpha + beta M
    + under_compute x m / (1 + m) is fitted to the stretches of at least ``LINE_MIN_BYTES`` per call
    (all of them if those have fewer than two sizes) by least absolute relative errors
    (:func:`_l1_relative_line`), and the m whose line has the smallest sum is kept. Then the cost:
    every stretch's time alone (less its m / (1 + m) share of compute) per call, at its bytes per
    call, as a non-decreasing ``table`` of per-size medians, as ``validate`` makes its table. Where
    no line with positive alpha and beta fits, m = 0."""
    sizes = sorted({b.bytes for b in samples})
    if len(sizes) < 2:
        raise CommschedError(
            f"the all-reduce cost needs at least two message sizes, got {len(sizes)} ({sizes}): too few buckets and probes"
        )
    large = [b for b in samples if b.bytes / b.calls >= LINE_MIN_BYTES]
    fit_on = large if len({round(b.bytes / b.calls) for b in large}) >= 2 else list(samples)
    a = np.array([[float(b.calls), float(b.bytes)] for b in fit_on])
    t = np.array([b.seconds for b in fit_on])
    ov = np.array([b.under_compute_s for b in fit_on])
    best: tuple[float, float] | None = None  # (loss, m)
    for m in SLOWDOWN_GRID:
        (alpha, beta), loss = _l1_relative_line(a, t - ov * m / (1 + m), t)
        if alpha <= 0 or beta <= 0 or alpha > MAX_SECONDS:
            continue
        if best is None or loss < best[0] - 1e-12:
            best = (loss, m)
    m = best[1] if best is not None else 0.0
    table, _ = _table([(b.bytes / b.calls, max(b.seconds - b.under_compute_s * m / (1 + m), 1e-9) / b.calls) for b in samples])
    pred = np.array([b.calls * table.time_s(max(1, round(b.bytes / b.calls))) + b.under_compute_s * m / (1 + m) for b in samples])
    err = float(np.max(np.abs(pred / np.array([b.seconds for b in samples]) - 1)))
    return table, "table", err, m


def _table(points: Sequence[tuple[float, float]]) -> tuple[Table, float]:
    sizes = sorted({max(1, round(b)) for b, _ in points})
    points = [(max(1, round(b)), t) for b, t in points]
    medians = [statistics.median(t for b, t in points if b == s) for s in sizes]
    xs, ys = nondecreasing_points(sizes, medians)
    if len(xs) < 2:
        xs, ys = (xs[0], xs[0] * 2), (ys[0], ys[0] * 2)
    table = Table(tuple(xs), tuple(ys))
    return table, max(abs(table.time_s(s) / m - 1) for s, m in zip(sizes, medians))


def fit_in_job(
    records: Sequence[Record],
    periods_s: Sequence[float],
    sizes: dict[str, int],
    probes: Sequence[Busy] = (),
    model: str = "model",
    batch_size: int = 1,
) -> InJobModel:
    """The profile (:func:`profile_of_steps`), cost and slowdown under compute (:func:`fit_cost`
    over the buckets' service times and the ``probes``, measured without compute) of a job's recorded steps."""
    profile, unused = profile_of_steps(records, periods_s, sizes, model, batch_size)
    samples = tuple(service_times(records)) + tuple(probes)
    cost, kind, err, m = fit_cost(samples)
    return InJobModel(profile, cost, kind, samples, err, unused, m)


def semantics_for(backend: str, comm_slowdown: float = 0.0) -> Semantics:
    """The semantics the in-job cost was measured under: one all-reduce at a time in launch order
    (the service times are each bucket's marginal time in DDP's FIFO, gloo's threads included),
    ``comm_slowdown`` m while backward compute runs."""
    return Semantics("gloo" if backend == "gloo" else "nccl", 1, comm_slowdown=comm_slowdown)
