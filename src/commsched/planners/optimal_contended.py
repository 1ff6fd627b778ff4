"""The optimum under contention: the least iteration time of the contention-aware simulator, exactly
or to within a factor 1 + tolerance.

:mod:`commsched.sim.contention` slows compute to 1 / (1 + compute_slowdown) of its speed while an
all-reduce is in flight, and an all-reduce to 1 / (1 + comm_slowdown) while compute runs (the
simplest form of LIBRA's g(b, r)). Then the end time of a bucket no longer says everything about a
schedule: two bucketings that end the all-reduces of the first k tensors at the same time can
differ in how far backward compute has come, and :mod:`~commsched.planners.optimal`'s recurrence
over end times alone is not exact any more. This module's programme keeps both.

State after the all-reduce of a bucket ending at tensor k: (f, p), the time it ends and the
backward work done by then (uncontended seconds; W_k is the work through tensor k, W the total).
The next bucket, tensors k..k'-1, is ready when compute reaches W_k'; nothing is in flight until
then, so it starts at s = f + max(0, W_k' - p) with progress q = max(p, W_k'). With R = W - q
compute left, c = 1 + compute_slowdown and m = 1 + comm_slowdown, its all-reduce of T = T(bytes):

- overlaps compute to its end when R c >= T m: it ends at s + T m, with progress q + T m / c;
- else compute ends first, after R c: the all-reduce ends at s + R c + (T - R c / m), progress W.

Both the end and the progress are monotone in the right direction: the end never decreases when f
grows or p shrinks, and the progress never decreases when p grows (it does not depend on f). So a
state (f, p) with f <= f' and p >= p' can never end later than (f', p') whatever follows, by
induction over the remaining buckets, and for each k only the Pareto front of states (least f for
each p) needs keeping. The front over all k, extended by every next bucket, is exact for any cost
function T; the answer is the least f at k = L. Among equally fast bucketings it does not look
for the fewest buckets.

With no contention :class:`~commsched.planners.optimal.Optimal` uses its O(L) programme instead:
this one is O(L^2 x front), and the fronts are not small on real models (over 300,000 states for
resnet50's 161 measured tensors, and growing). So with ``tolerance`` > 0 states whose end times
fall in one cell of width tolerance x LB / L (LB: forward, all backward, then the least all-reduce
that can hold the last tensor, a lower bound on any bucketing) keep only the one with the most
progress. A dropped state is replaced by one that ends less than a cell later with at least its
progress, and since a state's end time moves every later end time by exactly as much, each of the
at most L buckets of the optimal path loses less than a cell: the result is within
1 + tolerance of the optimum. States that cannot beat a known bucketing (lower bounds: the rest of
the all-reduces run one after another from f, and the last one starts after compute, which needs
at least W - p more) are dropped as they are made; the transitions of one k to every k' are one
vectorised step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from commsched.cost.models import CostModel


def contended_optimal_ends(
    forward_s: float,
    work_s: Sequence[float],
    sizes: Sequence[int],
    cost: CostModel,
    slow_compute: float,
    slow_comm: float,
    upper_bound_s: float = float("inf"),
    tolerance: float = 0.0,
    call_overhead_s: float = 0.0,
    under_compute=None,
    min_factor: float = 1.0,
) -> tuple[tuple[int, ...], float]:
    """Bucket ends of an optimal bucketing under contention and the end of its last all-reduce.

    ``slow_compute`` and ``slow_comm`` are the factors 1 + slowdown (>= 1); every bucket launched
    while compute has work left (those ending at or before the last tensor with backward work) costs
    ``under_compute(bytes)`` x T + ``call_overhead_s`` instead of T (``under_compute`` maps an array
    of sizes to factors; None is 1; ``min_factor`` is a lower bound of it, for the pruning bounds),
    as :mod:`commsched.sim.contention` does: that is T in every formula above for that bucket, so
    the proof holds as it stands. ``upper_bound_s``
    is the end time of any known bucketing; it only prunes, so when nothing beats it the result is
    empty (the caller keeps its bucketing).
    """
    n = len(work_s)
    work = np.concatenate(([0.0], np.cumsum(np.asarray(work_s, dtype=np.float64))))
    prefix = np.concatenate(([0], np.cumsum(np.asarray(sizes, dtype=np.int64)))).astype(np.float64)
    total = float(work[n])
    c, m = float(slow_compute), float(slow_comm)
    busy_to = max((i for i, x in enumerate(work_s) if x > 0), default=-1)  # see sim.contention.last_working
    comm_left, last_left = _remaining_comm_bounds(prefix, cost)
    # a factor below 1 makes all-reduces under compute cheaper: the bound on what is left shrinks
    # with it (the last all-reduce is launched after compute, so its bound stands)
    comm_left = comm_left * min(1.0, min_factor)
    bound = upper_bound_s * (1 + 1e-12)
    # no bucketing ends before compute (forward, all backward) and then the last tensor's all-reduce
    lowest = forward_s + total + float(last_left[0])
    grid = tolerance * lowest / n  # merge states whose end times share a cell this wide (see _merge)
    # Front of each k: arrays f, p, buckets so far, and the parent (its k and index in that front).
    # A front under construction (k2 > k) is kept pruned as candidates arrive, so it stays small.
    empty = (np.empty(0), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    pending: list[tuple] = [empty] * (n + 1)
    pending[0] = (np.array([forward_s]), np.array([0.0]), np.zeros(1, np.int64), np.array([-1]), np.array([-1]))
    final: list[tuple] = [empty] * (n + 1)
    for k in range(n):
        f, p, nb, _, _ = final[k] = pending[k]
        pending[k] = empty
        if f.size == 0:
            continue
        k2 = np.arange(k + 1, n + 1)
        w = work[k2][None, :]  # (1, K2): work through the last tensor of bucket k..k2-1
        t = cost.times_s(prefix[k + 1 :] - prefix[k])[None, :]  # (1, K2)
        if call_overhead_s or under_compute is not None:
            busy = (k2 <= busy_to)[None, :]
            factor = under_compute(prefix[k + 1 :] - prefix[k])[None, :] if under_compute is not None else 1.0
            t = np.where(busy, t * factor + call_overhead_s, t)
        f_, p_ = f[:, None], p[:, None]  # (S, 1)
        s = f_ + np.maximum(w - p_, 0.0)  # start of the next all-reduce (transition of the docstring)
        q = np.maximum(p_, w)
        r = total - q
        overlapped = r * c >= t * m
        f2 = np.where(r <= 0.0, s + t, np.where(overlapped, s + t * m, s + r * c + (t - r * c / m)))
        p2 = np.where(overlapped & (r > 0.0), q + t * m / c, total)
        lower = np.maximum(f2 + comm_left[k2][None, :], f2 + (total - p2) + last_left[k2][None, :])
        lower[:, -1] = f2[:, -1]  # k2 = n: the last all-reduce has ended
        keep = lower <= bound
        for j in np.flatnonzero(keep.any(axis=0)):
            rows = np.flatnonzero(keep[:, j])
            dest = k + 1 + int(j)
            cand = (f2[rows, j], p2[rows, j], nb[rows] + 1, np.full(rows.size, k), rows)
            pending[dest] = _pareto(_merge(_concat(pending[dest], cand), grid))
        if pending[n][0].size:
            bound = min(bound, float(pending[n][0].min()) * (1 + 1e-12))
    f, _, nb, pk, pi = final[n] = pending[n]
    if f.size == 0:
        return (), float("inf")
    best = int(np.lexsort((nb, f))[0])
    ends = []
    k, i = n, best
    while k > 0:
        ends.append(k)
        k, i = int(final[k][3][i]), int(final[k][4][i])
    return tuple(reversed(ends)), float(f[best])


def _concat(a: tuple, b: tuple) -> tuple:
    return tuple(np.concatenate((x, y)) for x, y in zip(a, b))


def _merge(front: tuple, grid: float) -> tuple:
    """Of the states whose end times fall in one cell ``grid`` seconds wide, keep the one with the
    most progress. A dropped state (f, p) leaves one (f' < f + grid, p' >= p), whose every
    continuation ends at most ``grid`` later than the dropped one's would (the end time shifts by
    exactly the shift of f, and never rises with p): so over a path of at most L buckets the result
    is at most L x grid above the optimum."""
    f = front[0]
    if grid <= 0.0 or f.size <= 1:
        return front
    cell = np.floor(f / grid)
    order = np.lexsort((front[2], -front[1], cell))
    first = np.ones(order.size, dtype=bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    return tuple(x[order[first]] for x in front)


def _pareto(front: tuple) -> tuple:
    """The states no other state dominates: by end time, each with more progress than every earlier
    one (on equal end and progress, the fewest buckets first)."""
    f, p, nb = front[0], front[1], front[2]
    if f.size <= 1:
        return front
    order = np.lexsort((nb, -p, f))
    p_sorted = p[order]
    best_before = np.maximum.accumulate(np.concatenate(([-np.inf], p_sorted[:-1])))
    kept = order[p_sorted > best_before]
    return tuple(x[kept] for x in front)


def _remaining_comm_bounds(prefix: np.ndarray, cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds on what is left after the buckets up to tensor k: ``comm[k]`` the least total
    all-reduce time of any bucketing of tensors k..L-1 (each at full speed, one after another), and
    ``last[k]`` the least time of the all-reduce that holds the last tensor (it starts after compute).
    Both by a backward pass over k (O(L^2) cost evaluations, vectorised)."""
    n = len(prefix) - 1
    comm, last = np.zeros(n + 1), np.zeros(n + 1)  # nothing is left after the last tensor
    for k in range(n - 1, -1, -1):
        t = cost.times_s(prefix[k + 1 :] - prefix[k])  # buckets k..k2-1 for k2 = k+1..n
        comm[k] = np.min(t + comm[k + 1 :])
        last[k] = min(t[-1], last[k + 1]) if k + 1 < n else t[-1]
    return comm, last
