"""The simulator with contention: backward compute slows while an all-reduce is in flight.

This is the simplest form of LIBRA's g(b, r) (and of the resource-sharing paper's Fig. 3): one
measured factor. While any all-reduce runs, compute progresses at 1 / (1 + slowdown) of its speed;
all-reduce times are unchanged. Everything else is DESIGN.md's semantics, and with ``slowdown = 0``
the result equals :func:`commsched.sim.timeline.simulate` (a property test checks it).

Because an all-reduce's start and end are known the moment its bucket is launched (start =
max(previous end, ready), end = start + T), the backward can be advanced tensor by tensor against
the already-known communication intervals: an exact event simulation in O(L + B).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.sim.timeline import check_ends, prefix_bytes
from commsched.types import ModelProfile, Span, Timeline


def _advance(t: float, work_s: float, busy: list[tuple[float, float]], k: int, slow: float) -> tuple[float, int]:
    """Time at which ``work_s`` of compute started at ``t`` completes; ``busy`` are sorted, disjoint
    communication intervals and ``k`` the first one that may still matter (returned updated)."""
    while work_s > 0:
        while k < len(busy) and busy[k][1] <= t:
            k += 1
        if k == len(busy):
            return t + work_s, k
        s, e = busy[k]
        if t < s:  # free run until the next all-reduce starts
            if t + work_s <= s:
                return t + work_s, k
            work_s -= s - t
            t = s
        # inside [t, e) compute runs at 1/slow of its speed
        if t + work_s * slow <= e:
            return t + work_s * slow, k
        work_s -= (e - t) / slow
        t = e
    return t, k


def simulate_contended(profile: ModelProfile, ends: Sequence[int], cost: CostModel, slowdown: float) -> Timeline:
    """Timeline of one iteration when compute slows by (1 + slowdown) during all-reduces."""
    if not (isinstance(slowdown, (int, float)) and math.isfinite(slowdown) and slowdown >= 0):
        raise CommschedError(f"slowdown must be a finite number >= 0, got {slowdown!r}")
    check_ends(ends, len(profile.tensors))
    slow = 1.0 + slowdown
    pb = prefix_bytes(profile)
    busy: list[tuple[float, float]] = []
    spans = [Span("forward", "forward", 0.0, profile.forward_s)]
    t = profile.forward_s
    k = 0
    comm_end = 0.0
    comm = 0.0
    j = 0
    for i, tensor in enumerate(profile.tensors):
        t, k = _advance(t, tensor.backward_s, busy, k, slow)
        if i + 1 == ends[j]:
            start = ends[j - 1] if j else 0
            nbytes = pb[i + 1] - pb[start]
            s = max(comm_end, t)
            dur = cost.time_s(nbytes)
            comm_end = s + dur
            comm += dur
            busy.append((s, comm_end))
            spans.append(Span("allreduce", f"bucket {j} ({i + 1 - start} tensors)", s, comm_end, nbytes))
            j += 1
    backward_end = t
    spans.insert(1, Span("backward", "backward", profile.forward_s, backward_end))
    if profile.optimizer_s > 0:
        spans.append(Span("optimizer", "optimizer", comm_end, comm_end + profile.optimizer_s))
    return Timeline(
        spans=tuple(spans),
        iteration_s=comm_end + profile.optimizer_s,
        compute_s=backward_end,
        comm_s=comm,
        non_overlapped_comm_s=comm_end - backward_end,
    )
