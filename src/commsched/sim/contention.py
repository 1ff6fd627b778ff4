"""The simulator under a runtime's execution semantics and contention (:mod:`commsched.sim.semantics`).

Backward compute is sequential as in DESIGN.md; bucket j is launched when its last tensor is ready
(every earlier bucket is launched by then: ready times only grow). Launched all-reduces wait in a
FIFO queue for one of the runtime's ``threads`` (1 for NCCL's stream, 2 for gloo's worker threads);
the n in flight each progress at (1 + gain (n - 1)) / n of their solo speed, and at 1 / (1 + m) of
that while compute runs; compute runs at 1 / (1 + c) while one is in flight, 1 / (1 + c2) while
more are. A bucket launched while compute still has work to do costs factor(b) x T(b) + d of work
(``under_compute``, ``call_overhead_s``). With one thread and no contention this is :func:`commsched.sim.timeline.simulate`; with one thread and the two factors,
LIBRA's g(b, r) in its simplest form (the previous contended simulator: a test keeps a frozen
copy of it and compares).

An event simulation with piecewise-constant rates: between two events (a tensor's gradient ready,
an all-reduce done) every rate is fixed, so each step advances exactly to the nearer event; there
are at most L + B events.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import check_ends, prefix_bytes, simulate
from commsched.types import ModelProfile, Span, Timeline


def simulate_run(profile: ModelProfile, ends: Sequence[int], cost: CostModel, semantics: Semantics = NCCL) -> Timeline:
    """Timeline of one iteration for the bucketing ``ends`` under ``semantics``."""
    check_ends(ends, len(profile.tensors))
    if semantics.threads == 1 and not semantics.contended:
        return simulate(profile, ends, cost)
    pb = prefix_bytes(profile)
    starts, finishes, backward_end = _events(profile.forward_s, [t.backward_s for t in profile.tensors], pb, ends, cost, semantics)
    spans = [Span("forward", "forward", 0.0, profile.forward_s), Span("backward", "backward", profile.forward_s, backward_end)]
    comm = 0.0
    for j, end in enumerate(ends):
        start = ends[j - 1] if j else 0
        comm += finishes[j] - starts[j]
        spans.append(Span("allreduce", f"bucket {j} ({end - start} tensors)", starts[j], finishes[j], pb[end] - pb[start]))
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


def _events(forward_s, work, pb, ends, cost: CostModel, sem: Semantics):
    """Bucket execution starts, bucket ends and the end of backward (the module docstring's loop)."""
    n, nb = len(work), len(ends)
    c, c2, m, d = 1.0 + sem.compute_slowdown, 1.0 + sem.compute_slowdown_many, 1.0 + sem.comm_slowdown, sem.call_overhead_s
    threads, gain = sem.threads, sem.concurrency_gain
    busy_to = last_working(work)
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
        r_compute = (1.0 / c if k == 1 else 1.0 / c2) if k else 1.0
        r_job = ((1.0 + gain * (k - 1)) / k) / (m if computing else 1.0) if k else 0.0
        dt_compute = left / r_compute if computing else math.inf
        first = min(running, key=remaining.__getitem__) if k else -1
        dt_job = remaining[first] / r_job if k else math.inf
        dt = min(dt_compute, dt_job)
        if dt == math.inf:
            break
        t += dt
        if computing:
            left = 0.0 if dt == dt_compute else left - dt * r_compute
        if k:
            for q in running:
                remaining[q] = 0.0 if (q == first and dt == dt_job) else max(0.0, remaining[q] - dt * r_job)
            done = [q for q in running if remaining[q] <= 0.0]
            for q in done:
                finishes[q] = t
                system.remove(q)
        if computing and left <= 0.0:
            i += 1
            while j_next < nb and i == ends[j_next]:
                lo = ends[j_next - 1] if j_next else 0
                nbytes = pb[ends[j_next]] - pb[lo]
                t_solo = cost.time_s(nbytes)
                if i <= busy_to:  # launched while compute has work left
                    t_solo = t_solo * sem.factor_under_compute(nbytes) + d
                remaining[j_next] = t_solo
                system.append(j_next)
                j_next += 1
            if i < n:
                left = work[i]
            else:
                backward_end = t
    return starts, finishes, backward_end
