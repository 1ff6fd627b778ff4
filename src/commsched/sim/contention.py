"""The simulator with contention between backward compute and all-reduce.

This is the simplest form of LIBRA's g(b, r) (and of the resource-sharing paper's Fig. 3): two
measured factors. While an all-reduce is in flight, compute progresses at 1 / (1 + compute_slowdown)
of its speed; while compute runs, an all-reduce progresses at 1 / (1 + comm_slowdown) of its speed
(on a CPU the collective's reductions and copies compete for the same cores). Everything else is
DESIGN.md's semantics, and with both factors 0 the result equals
:func:`commsched.sim.timeline.simulate` (a property test checks it).

An event simulation with piecewise-constant rates: between two events (a tensor's gradient ready,
an all-reduce done) both rates are fixed, so each step advances to the nearer event exactly; there
are at most L + B events.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.sim.timeline import check_ends, prefix_bytes
from commsched.types import ModelProfile, Span, Timeline


def _factor(what: str, v: float) -> float:
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
        raise CommschedError(f"{what} must be a finite number >= 0, got {v!r}")
    return 1.0 + float(v)


def simulate_contended(
    profile: ModelProfile,
    ends: Sequence[int],
    cost: CostModel,
    compute_slowdown: float = 0.0,
    comm_slowdown: float = 0.0,
) -> Timeline:
    """Timeline of one iteration under mutual slowdown of compute and communication."""
    slow_compute = _factor("compute_slowdown", compute_slowdown)
    slow_comm = _factor("comm_slowdown", comm_slowdown)
    check_ends(ends, len(profile.tensors))
    pb = prefix_bytes(profile)
    starts, finishes, backward_end = _events(
        profile.forward_s, [t.backward_s for t in profile.tensors], pb, ends, cost, slow_compute, slow_comm
    )
    spans = [Span("forward", "forward", 0.0, profile.forward_s), Span("backward", "backward", profile.forward_s, backward_end)]
    comm = 0.0
    for j, end in enumerate(ends):
        start = ends[j - 1] if j else 0
        nbytes = pb[end] - pb[start]
        comm += finishes[j] - starts[j]
        spans.append(Span("allreduce", f"bucket {j} ({end - start} tensors)", starts[j], finishes[j], nbytes))
    last = finishes[-1]
    if profile.optimizer_s > 0:
        spans.append(Span("optimizer", "optimizer", last, last + profile.optimizer_s))
    return Timeline(
        spans=tuple(spans),
        iteration_s=last + profile.optimizer_s,
        compute_s=backward_end,
        comm_s=comm,
        non_overlapped_comm_s=last - backward_end,
    )


def contended_end_s(
    forward_s: float,
    work_s: Sequence[float],
    prefix: Sequence[int],
    ends: Sequence[int],
    cost: CostModel,
    slow_compute: float,
    slow_comm: float,
) -> float:
    """End of the last all-reduce, without building a timeline (``Optimal`` scores its bounds with
    it); factors are 1 + slowdown.

    ``prefix`` is :func:`~commsched.sim.timeline.prefix_bytes` of the profile; nothing is checked here.
    """
    return _events(forward_s, work_s, prefix, ends, cost, slow_compute, slow_comm)[1][-1]


def _events(forward_s, work, pb, ends, cost, slow_compute, slow_comm):
    """Bucket starts, bucket ends and the end of backward, by the event loop of the module docstring."""
    n = len(work)
    t = forward_s
    i, left = 0, work[0]  # tensor being computed and its remaining uncontended work
    queue: deque[int] = deque()  # buckets ready, waiting for the channel
    active, comm_left = -1, 0.0
    j_next = 0  # next bucket to close
    starts, finishes = [0.0] * len(ends), [0.0] * len(ends)
    backward_end = t
    while i < n or active >= 0 or queue:
        if active < 0 and queue:
            active = queue.popleft()
            comm_left = cost.time_s(pb[ends[active]] - pb[ends[active - 1] if active else 0])
            starts[active] = t
        computing = i < n
        r_compute = 1.0 / slow_compute if active >= 0 else 1.0
        r_comm = 1.0 / slow_comm if computing else 1.0
        dt_compute = left / r_compute if computing else math.inf
        dt_comm = comm_left / r_comm if active >= 0 else math.inf
        dt = min(dt_compute, dt_comm)
        if dt == math.inf:
            break
        t += dt
        if computing:
            left = 0.0 if dt == dt_compute else left - dt * r_compute
        if active >= 0:
            comm_left = 0.0 if dt == dt_comm else comm_left - dt * r_comm
        if computing and left <= 0.0:
            i += 1
            if i == ends[j_next]:
                queue.append(j_next)
                j_next += 1
            if i < n:
                left = work[i]
            else:
                backward_end = t
        if active >= 0 and comm_left <= 0.0:
            finishes[active] = t
            active = -1
    return starts, finishes, backward_end
