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
    coarse_first: bool = True,
) -> tuple[tuple[int, ...], float]:
    """Bucket ends of an optimal bucketing under contention and the end of its last all-reduce.

    ``slow_compute`` and ``slow_comm`` are the factors 1 + slowdown (>= 1); every bucket launched
    while compute has work left (those ending at or before the last tensor with backward work) costs
    ``under_compute(bytes)`` x T + ``call_overhead_s`` instead of T (``under_compute`` maps an array
    of sizes to factors; None is 1; ``min_factor`` is a lower bound of it, for the pruning bounds),
    as :mod:`commsched.sim.contention` does: that is T in every formula above for that bucket, so
    the proof holds as it stands. ``upper_bound_s``
    is the end time of any known bucketing; it only prunes, so when nothing beats it the result is
    empty (the caller keeps its bucketing). ``coarse_first``: :func:`two_pass` (off: the programme
    at ``tolerance`` alone, as the tests of its bound need).
    """
    busy_to = max((i for i, x in enumerate(work_s) if x > 0), default=-1)  # see sim.contention.last_working
    c, m = float(slow_compute), float(slow_comm)

    def option(k: int, k2: np.ndarray, nbytes: np.ndarray):
        t = cost.times_s(nbytes)
        if call_overhead_s or under_compute is not None:
            busy = k2 <= busy_to
            factor = under_compute(nbytes) if under_compute is not None else 1.0
            t = np.where(busy, t * factor + call_overhead_s, t)
        return t, m, c

    # a factor below 1 makes all-reduces under compute cheaper: the bound on what is left shrinks
    # with it (the last all-reduce is launched after compute, so its bound stands)
    scale = min(1.0, min_factor)
    def search(tol, bound):
        return front_search(
            forward_s, work_s, sizes, [option], lambda b: cost.times_s(b) * scale, cost.times_s, bound, tol, overlap_bound=(c, m)
        )

    ends, end_s, _ = two_pass(search, tolerance, upper_bound_s) if coarse_first else search(tolerance, upper_bound_s)
    return ends, end_s


COARSE_TOLERANCE = 1.0


def two_pass(search, tolerance: float, upper_bound_s: float):
    """``search(tolerance, upper_bound_s)`` first at :data:`COARSE_TOLERANCE` (fast: wide cells),
    then at ``tolerance`` bounded by what the first found, which prunes far more. Still within
    1 + ``tolerance`` of the optimum: the second pass finds a result within it whenever one beats
    the first's, and otherwise the first's is within it."""
    if tolerance >= COARSE_TOLERANCE:
        return search(tolerance, upper_bound_s)
    coarse = search(COARSE_TOLERANCE, upper_bound_s)
    if coarse[0]:
        upper_bound_s = min(upper_bound_s, coarse[1])
    fine = search(tolerance, upper_bound_s)
    return fine if fine[0] else coarse


def front_search(
    forward_s, work_s, sizes, options, least_time, least_last_time, upper_bound_s=float("inf"), tolerance=0.0, drop_dominated=False,
    overlap_bound=None,
):
    """The programme of the module docstring over bucketings and, per bucket, one of ``options``.

    Each option maps (k, k2 array, bytes array) of the candidate buckets k..k2-1 to (T alone, s, c):
    the all-reduce's work alone, the factor s >= 1 by which it is longer while compute runs beside
    it (so T s in flight to its end if compute outlasts it; ``slow_comm`` above) and compute's time
    factor c under it (``slow_compute``); each may be a scalar or an array over the candidates.
    ``least_time(bytes)`` and ``least_last_time(bytes)`` bound any bucket's all-reduce and the last
    one's from below (they prune). Returns (ends, end of the last all-reduce, option index per
    bucket); empty when nothing beats ``upper_bound_s``.

    The dominance argument needs s >= 1 (an all-reduce never faster beside compute than alone,
    LIBRA's Assumption 2): then the end never rises with progress. :func:`front_search` does not
    check it; callers that cannot promise it say so.

    ``drop_dominated`` (needs s >= 1 too): for a bucket, option B makes option A useless when B's
    all-reduce is no longer alone (T_B <= T_A) nor beside compute (T_B s_B <= T_A s_A), slows
    compute no more (c_B <= c_A) and covers at least as much compute while in flight
    (T_B s_B / c_B >= T_A s_A / c_A). Then from any state B's all-reduce is at every moment at least
    as far along as A's (so it ends no later) and compute is at least as far along when it ends
    (in flight to its end: q + T s / c; else all of it), so B's state dominates A's and A's is never
    made. Among options equal in all four, the first is kept.

    ``overlap_bound`` = (c, s), when every option slows compute by at least c and its all-reduce by
    at least s beside compute, and at most that (one option, as :func:`contended_optimal_ends`):
    then from a state with X of compute and at least Y of all-reduce work left, the rest takes at
    least X + Y - max(0, 1/c + 1/s - 1) min(X c, Y s) (overlapping o seconds does o / c of compute
    and o / s of all-reduce work in o seconds; the best o is as long as both last), a pruning bound
    that counts what contention costs.
    """
    n = len(work_s)
    work = np.concatenate(([0.0], np.cumsum(np.asarray(work_s, dtype=np.float64))))
    prefix = np.concatenate(([0], np.cumsum(np.asarray(sizes, dtype=np.int64)))).astype(np.float64)
    total = float(work[n])
    comm_left, last_left = _remaining_comm_bounds(prefix, least_time, least_last_time)
    bound = upper_bound_s * (1 + 1e-12)
    # no bucketing ends before compute (forward, all backward) and then the last tensor's all-reduce
    lowest = forward_s + total + float(last_left[0])
    grid = tolerance * lowest / n  # merge states whose end times share a cell this wide (see _merge)
    # Front of each k: arrays f, p, buckets so far, the parent (its k and index in that front) and
    # the option of the bucket that ends here. A front under construction (k2 > k) is kept pruned
    # as candidates arrive, so it stays small.
    empty = (np.empty(0), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    # Candidates wait in a list per destination and are folded into its front when they outnumber
    # it (and when the destination is reached): one sort per fold, not per source.
    pending: list[tuple] = [empty] * (n + 1)
    pending[0] = (np.array([forward_s]), np.array([0.0]), np.zeros(1, np.int64), np.array([-1]), np.array([-1]), np.array([-1]))
    waiting: list[list[tuple]] = [[] for _ in range(n + 1)]
    waiting_rows = [0] * (n + 1)

    def fold(dest: int) -> None:
        if waiting[dest]:
            pending[dest] = _front(_concat_all([pending[dest], *waiting[dest]]), grid)
            waiting[dest], waiting_rows[dest] = [], 0

    final: list[tuple] = [empty] * (n + 1)
    for k in range(n):
        fold(k)
        f, p, nb, _, _, _ = final[k] = pending[k]
        pending[k] = empty
        if f.size == 0:
            continue
        k2 = np.arange(k + 1, n + 1)
        w = work[k2][None, :]  # (1, K2): work through the last tensor of bucket k..k2-1
        nbytes = prefix[k + 1 :] - prefix[k]
        f_, p_ = f[:, None], p[:, None]  # (S, 1)
        s = f_ + np.maximum(w - p_, 0.0)  # start of the next all-reduce (transition of the docstring)
        q = np.maximum(p_, w)
        r = total - q
        # every option's transitions at once: arrays (options, states, K2)
        t, slow, c = (
            np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), nbytes.shape) for v in col])[:, None, :]
            for col in zip(*(opt(k, k2, nbytes) for opt in options))
        )
        ids = np.arange(len(options))
        useless = np.zeros((len(options), 1, nbytes.size), dtype=bool)
        if drop_dominated and len(options) > 1:
            useless = _dominated(t[:, 0], slow[:, 0], c[:, 0])[:, None, :]
            used = ~useless.all(axis=(1, 2))
            ids, t, slow, c, useless = ids[used], t[used], slow[used], c[used], useless[used]
        overlapped = r * c >= t * slow
        f2 = np.where(r <= 0.0, s + t, np.where(overlapped, s + t * slow, s + r * c + (t - r * c / slow)))
        p2 = np.where(overlapped & (r > 0.0), q + t * slow / c, total)
        lower = np.maximum(f2 + comm_left[k2], f2 + (total - p2) + last_left[k2])
        if overlap_bound is not None:
            oc, os_ = overlap_bound
            x, y = total - p2, comm_left[k2]
            lower = np.maximum(lower, f2 + x + y - max(0.0, 1 / oc + 1 / os_ - 1) * np.minimum(x * oc, y * os_))
        lower[:, :, -1] = f2[:, :, -1]  # k2 = n: the last all-reduce has ended
        keep = (lower <= bound) & ~useless
        # every kept candidate at once, grouped by destination (one gather, then slices)
        js, opts, rows = np.nonzero(keep.transpose(2, 0, 1))
        if js.size:
            cols = (f2[opts, rows, js], p2[opts, rows, js], nb[rows] + 1, np.full(rows.size, k), rows, ids[opts])
            cuts = np.flatnonzero(np.diff(js)) + 1
            starts = np.concatenate(([0], cuts))
            stops = np.concatenate((cuts, [js.size]))
            for a, b in zip(starts.tolist(), stops.tolist()):
                dest = k + 1 + int(js[a])
                waiting[dest].append(tuple(x[a:b] for x in cols))
                waiting_rows[dest] += b - a
                if waiting_rows[dest] > max(4096, 4 * pending[dest][0].size):
                    fold(dest)
        if waiting[n]:
            fold(n)
        if pending[n][0].size:
            bound = min(bound, float(pending[n][0].min()) * (1 + 1e-12))
    fold(n)
    f, _, nb, pk, pi, po = final[n] = pending[n]
    if f.size == 0:
        return (), float("inf"), ()
    best = int(np.lexsort((nb, f))[0])
    ends, chosen = [], []
    k, i = n, best
    while k > 0:
        ends.append(k)
        chosen.append(int(final[k][5][i]))
        k, i = int(final[k][3][i]), int(final[k][4][i])
    return tuple(reversed(ends)), float(f[best]), tuple(reversed(chosen))


def _dominated(t: np.ndarray, slow: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(options, K2): True where another option makes this one useless (:func:`front_search`)."""
    to = t * slow
    cover = to / c
    # [a, b, k2]: b is at least as good as a in all four
    ge = (t[None] <= t[:, None]) & (to[None] <= to[:, None]) & (c[None] <= c[:, None]) & (cover[None] >= cover[:, None])
    same = (t[None] == t[:, None]) & (to[None] == to[:, None]) & (c[None] == c[:, None])
    j = t.shape[0]
    earlier = np.arange(j)[None, :, None] < np.arange(j)[:, None, None]  # b listed before a
    beats = ge & (~same | earlier)
    beats[np.arange(j), np.arange(j)] = False
    return beats.any(axis=1)


def _concat_all(parts: list[tuple]) -> tuple:
    return tuple(np.concatenate(cols) for cols in zip(*parts))


def _front(front: tuple, grid: float) -> tuple:
    """:func:`_pareto` then, of the states left in one cell ``grid`` seconds wide, the one with the
    most progress: what :func:`_merge` then :func:`_pareto` keep, with one sort. On a Pareto front
    sorted by end time, progress rises too, so a cell's most progress is its last state; and a
    cell's best state that is dominated from an earlier cell leaves no state of that cell on the
    front either way."""
    front = _pareto(front)
    f = front[0]
    if grid <= 0.0 or f.size <= 1:
        return front
    cell = np.floor(f / grid)
    last = np.ones(f.size, dtype=bool)
    last[:-1] = cell[1:] != cell[:-1]
    return tuple(x[last] for x in front)


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


def _remaining_comm_bounds(prefix: np.ndarray, least_time, least_last_time) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds on what is left after the buckets up to tensor k: ``comm[k]`` the least total
    all-reduce time of any bucketing of tensors k..L-1 (each at full speed, one after another), and
    ``last[k]`` the least time of the all-reduce that holds the last tensor (it starts after compute).
    Both by a backward pass over k (O(L^2) cost evaluations, vectorised)."""
    n = len(prefix) - 1
    comm, last = np.zeros(n + 1), np.zeros(n + 1)  # nothing is left after the last tensor
    for k in range(n - 1, -1, -1):
        t = least_time(prefix[k + 1 :] - prefix[k])  # buckets k..k2-1 for k2 = k+1..n
        comm[k] = np.min(t + comm[k + 1 :])
        tl = least_last_time(prefix[n : n + 1] - prefix[k])[0]
        last[k] = min(tl, last[k + 1]) if k + 1 < n else tl
    return comm, last
