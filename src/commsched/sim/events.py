"""The simulator under a runtime's execution semantics and contention (:mod:`commsched.sim.semantics`).

Backward compute is sequential as in docs/design.md; bucket j is launched when its last tensor is ready
(every earlier bucket is launched by then: ready times only grow). Launched all-reduces wait in a
FIFO queue for one of the runtime's ``threads`` (1 for NCCL's stream, 2 for gloo's worker threads);
the n in flight each progress at (1 + gain (n - 1)) / n of their solo speed, and at 1 / (1 + m) of
that, and at 1 / (factor(b) ratio(b)) (``under_compute`` and ``launch_factor_points``:
:meth:`~commsched.sim.semantics.Semantics.bucket_factor`), while compute runs; compute runs at
1 / (1 + c) while one is in flight, 1 / (1 + c2) while more are. While compute runs, an all-reduce
also takes d more (``call_overhead_s``: its factor is factor(b) ratio(b) + d / T(b)); a bucket launched while compute
still has work to do costs compute e more (``launch_compute_s``, right after the launch). With one thread and no contention this is :func:`commsched.sim.timeline.simulate`; with one thread and the two factors,
LIBRA's g(b, r) in its simplest form (the previous contended simulator: a test keeps a frozen
copy of it and compares).

An event simulation with piecewise-constant rates: between two events (a tensor's gradient ready,
an all-reduce done) every rate is fixed, so each step advances exactly to the nearer event; there
are at most L + B events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from commsched.cost.resource_models import ClusterResources, ResourceConfig
from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.sim.semantics import NCCL, Semantics, factor_with_call
from commsched.sim.timeline import check_ends, prefix_bytes, simulate
from commsched.types import ModelProfile, Span, Timeline


def simulate_run(profile: ModelProfile, ends: Sequence[int], cost: CostModel, semantics: Semantics = NCCL) -> Timeline:
    """Timeline of one iteration for the bucketing ``ends`` under ``semantics``."""
    check_ends(ends, len(profile.tensors))
    if semantics.threads == 1 and not semantics.contended:
        return simulate(profile, ends, cost)
    pb = prefix_bytes(profile)
    return _timeline(profile, ends, pb, _events(profile.forward_s, [t.backward_s for t in profile.tensors], pb, ends, cost, semantics))


def simulate_resources(
    profile: ModelProfile, ends: Sequence[int], cost: CostModel, resources: ClusterResources, configs: Sequence[ResourceConfig]
) -> Timeline:
    """Timeline of one iteration where bucket j's all-reduce runs with ``configs[j]``, all-reduces one
    at a time in bucket order (NCCL, one stream), under the cluster's contention model.

    LIBRA's stage model (Eq. 8-15) in event form: while bucket j's all-reduce is in flight and
    backward compute has work left, compute runs at 1 / compute_factor(R_j) of its speed (Eq. 5)
    and the all-reduce at 1 / p(c_j, R_j) of itself per second (Eq. 6, 8); when one of the two ends
    first, the other goes on at its own rate alone (the residuals of Eq. 9-11: compute at full
    speed, the all-reduce at 1 / q(c_j, R_j)). With :class:`ConstantContention` this is
    :func:`simulate_contended` with the same two factors; with no contention, :func:`simulate`
    (property tests check both).

    On a stock-NCCL cluster each bucket runs as the config NCCL uses at its size
    (:meth:`~commsched.cost.resource_models.ClusterResources.effective`: fewer channels, and fewer
    threads, for small all-reduces); its span says so (``2x256, runs 1x256``).
    """
    check_ends(ends, len(profile.tensors))
    if len(configs) != len(ends):
        raise CommschedError(f"{len(ends)} buckets need {len(ends)} resource configs, got {len(configs)}")
    pb = prefix_bytes(profile)
    per_bucket = resource_terms(pb, ends, cost, resources, configs)
    work = [t.backward_s for t in profile.tensors]
    names = []
    for j, c in enumerate(configs):
        run = resources.effective(c, pb[ends[j]] - pb[ends[j - 1] if j else 0])
        names.append(c.short if run == c else f"{c.short}, runs {run.short}")
    return _timeline(profile, ends, pb, _events(profile.forward_s, work, pb, ends, cost, NCCL, per_bucket), names)


def resource_events(
    profile: ModelProfile, ends: Sequence[int], cost: CostModel, resources: ClusterResources, configs: Sequence[ResourceConfig]
):
    """(starts, ends of each all-reduce, end of backward) of :func:`simulate_resources`, without
    building a timeline (planners score many candidates with it); nothing is checked here."""
    pb = prefix_bytes(profile)
    work = [t.backward_s for t in profile.tensors]
    return _events(profile.forward_s, work, pb, ends, cost, NCCL, resource_terms(pb, ends, cost, resources, configs))


def resource_terms(pb, ends, cost: CostModel, resources: ClusterResources, configs: Sequence[ResourceConfig]):
    """Per bucket: its all-reduce's time alone (q + a), the factor p / q by which it slows while
    compute runs, and compute's time factor under it (:mod:`commsched.cost.resource_models`), all for
    the config the bucket runs as at its size (on stock NCCL the channels NCCL uses there,
    :meth:`~commsched.cost.resource_models.ClusterResources.effective`; the config itself elsewhere)."""
    model = resources.contention
    alone, slow, cfac = [], [], []
    for j, end in enumerate(ends):
        nbytes = pb[end] - pb[ends[j - 1] if j else 0]
        cfg = resources.effective(resources.check(configs[j]), nbytes)
        q = float(model.allreduce_s(cost, nbytes, cfg, False))
        p = float(model.allreduce_s(cost, nbytes, cfg, True))
        alone.append(q)
        slow.append(p / q if q > 0 else 1.0)
        cfac.append(float(model.compute_factor(cfg)))
    return alone, slow, cfac


def _timeline(profile: ModelProfile, ends: Sequence[int], pb, events, configs: Sequence[str] | None = None) -> Timeline:
    starts, finishes, backward_end = events
    spans = [Span("forward", "forward", 0.0, profile.forward_s), Span("backward", "backward", profile.forward_s, backward_end)]
    comm = 0.0
    for j, end in enumerate(ends):
        start = ends[j - 1] if j else 0
        comm += finishes[j] - starts[j]
        what = f"{end - start} tensors" + (f", {configs[j]}" if configs else "")
        spans.append(Span("allreduce", f"bucket {j} ({what})", starts[j], finishes[j], pb[end] - pb[start]))
    last = max(finishes)
    if profile.optimizer_s > 0:
        spans.append(Span("optimizer", "optimizer", last, last + profile.optimizer_s))
    return Timeline(
        spans=tuple(spans),
        iteration_s=last + profile.optimizer_s,
        compute_s=backward_end,
        comm_s=comm,
        non_overlapped_comm_s=max(0.0, last - backward_end),
    )


def simulate_contended(
    profile: ModelProfile,
    ends: Sequence[int],
    cost: CostModel,
    compute_slowdown: float = 0.0,
    comm_slowdown: float = 0.0,
) -> Timeline:
    """The serial (NCCL) run under two constant contention factors."""
    for what, v in (("compute_slowdown", compute_slowdown), ("comm_slowdown", comm_slowdown)):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
            raise CommschedError(f"{what} must be a finite number >= 0, got {v!r}")
    return simulate_run(profile, ends, cost, Semantics(compute_slowdown=compute_slowdown, comm_slowdown=comm_slowdown))


def contended_end_s(
    forward_s: float,
    work_s: Sequence[float],
    prefix: Sequence[int],
    ends: Sequence[int],
    cost: CostModel,
    semantics: Semantics,
) -> float:
    """End of the last all-reduce, without building a timeline (planners score bounds with it).

    ``prefix`` is :func:`~commsched.sim.timeline.prefix_bytes` of the profile; nothing is checked here.
    """
    return max(_events(forward_s, work_s, prefix, ends, cost, semantics)[1])


def last_working(work: Sequence[float]) -> int:
    """Index of the last tensor with backward work (-1 when none): a bucket ending at tensor k
    (exclusive end) is launched while compute still has work to do iff k <= last_working."""
    return max((i for i, w in enumerate(work) if w > 0), default=-1)


def _events(forward_s, work, pb, ends, cost: CostModel, sem: Semantics, per_bucket=None):
    """Bucket execution starts, bucket ends and the end of backward (the module docstring's loop).

    ``per_bucket`` (the resource simulator's) gives, for each bucket, its work alone in seconds,
    the factor by which its progress slows while compute runs, and compute's time factor while it
    alone is in flight; without it they come from ``sem`` (T, (1 + m)(factor(b) ratio(b) + d / T), 1 + c:
    :meth:`~commsched.sim.semantics.Semantics.bucket_factor`).
    """
    n, nb = len(work), len(ends)
    c2, d, e = 1.0 + sem.compute_slowdown_many, sem.call_overhead_s, sem.launch_compute_s
    threads, gain = sem.threads, sem.concurrency_gain
    busy_to = last_working(work)
    if per_bucket is None:
        alone, slow, cfac = [0.0] * nb, [0.0] * nb, [1.0 + sem.compute_slowdown] * nb
        for j, end in enumerate(ends):
            nbytes = pb[end] - pb[ends[j - 1] if j else 0]
            # the size's factor and d apply only while compute runs (below): a bucket launched
            # under compute that waits in the queue, or outlasts compute, goes at its speed alone after
            alone[j] = cost.time_s(nbytes)
            slow[j] = (1.0 + sem.comm_slowdown) * factor_with_call(sem.bucket_factor(nbytes), d, alone[j])
    else:
        alone, slow, cfac = per_bucket
    t = forward_s
    i, left = 0, work[0]  # tensor being computed and its remaining uncontended work
    system: list[int] = []  # launched, unfinished buckets in FIFO order; the first `threads` run
    remaining = [0.0] * nb
    starts, finishes = [math.nan] * nb, [0.0] * nb
    j_next = 0
    backward_end = t
    while i < n or system:
        running = system[:threads]
        for q in running:
            if starts[q] != starts[q]:
                starts[q] = t
        computing = i < n
        k = len(running)
        r_compute = (1.0 / cfac[running[0]] if k == 1 else 1.0 / c2) if k else 1.0
        share = (1.0 + gain * (k - 1)) / k if k else 0.0
        dt_compute = left / r_compute if computing else math.inf
        first, dt_job = -1, math.inf
        for q in running:
            dq = remaining[q] / (share / (slow[q] if computing else 1.0))
            if dq < dt_job:
                first, dt_job = q, dq
        dt = min(dt_compute, dt_job)
        if dt == math.inf:
            break
        t += dt
        if computing:
            left = 0.0 if dt == dt_compute else left - dt * r_compute
        if k:
            for q in running:
                r_job = share / (slow[q] if computing else 1.0)
                remaining[q] = 0.0 if (q == first and dt == dt_job) else max(0.0, remaining[q] - dt * r_job)
            done = [q for q in running if remaining[q] <= 0.0]
            for q in done:
                finishes[q] = t
                system.remove(q)
        if computing and left <= 0.0:
            i += 1
            launched = 0
            while j_next < nb and i == ends[j_next]:
                remaining[j_next] = alone[j_next]
                system.append(j_next)
                j_next += 1
                launched += 1
            if i < n:
                # launching costs compute e per bucket while compute has work left (ends[j] <= busy_to)
                left = work[i] + (e * launched if i <= busy_to else 0.0)
            else:
                backward_end = t
    return starts, finishes, backward_end
