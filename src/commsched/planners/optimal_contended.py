"""The optimum under contention: the least iteration time of the contention-aware simulator, exactly
or to within a factor 1 + tolerance.

:mod:`commsched.sim.events` slows compute to 1 / (1 + compute_slowdown) of its speed while an
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

With m >= 1 both the end and the progress are monotone in the right direction: the end never
decreases when f grows or p shrinks, and the progress never decreases when p grows (it does not
depend on f). (With m < 1, an all-reduce faster beside compute than alone as measured for small
ones, the end can fall as p shrinks; :func:`front_search` then orders states by f + kappa p
instead of f, and everything below holds with that in place of f.) So a
state (f, p) with f <= f' and p >= p' can never end later than (f', p') whatever follows, by
induction over the remaining buckets, and for each k only the Pareto front of states (least f for
each p) needs keeping. The front over all k, extended by every next bucket, is exact for any cost
function T; the answer is the least f at k = L. Among equally fast bucketings it does not look
for the fewest buckets.

With no contention :class:`~commsched.planners.optimal.Optimal` uses its O(L) programme instead:
this one is O(L^2 x front), and the fronts are not small on real models (thousands of states
per tensor). So with ``tolerance`` > 0 states whose end times
fall in one cell of width tolerance x LB / L (LB: forward, all backward, then the least all-reduce
that can hold the last tensor, a lower bound on any bucketing) keep only the one with the most
progress. A dropped state is replaced by one that ends less than a cell later (in f + kappa p)
with at least its progress, and since a state's end time moves every later end time by exactly as much, each of the
at most L buckets of the optimal path loses less than a cell: the result is within
1 + tolerance of the optimum.

Three things make it fast (densenet201's 604 tensors in seconds, not minutes):

- Few transitions. A state with p below W_k' waits for compute, and everything after depends on it
  through f - p alone (a shift), so per destination only the waiting state with the least f - p is
  extended, plus the states whose next bucket is already ready (:func:`_sources`).
- A tight bound. States that cannot beat a known bucketing are dropped as they are made; besides
  the rest of the all-reduces one after another and the last one after compute, the bound counts
  what overlap costs under contention by a small linear programme (:func:`_overlap_vertices`),
  within 0.1% of the optimum at the root on resnet50 under the resource-sharing preset.
- A proof instead of a fine grid (:func:`certified`). Wide cells first; the same programme with
  each cell's states merged into one that dominates them all is a lower bound, and when it finds
  nothing under U / (1 + tolerance) the incumbent U is proven within the tolerance. Only when no
  proof comes does the grid shrink, down to tolerance x LB / L, where the bound above holds anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import warnings

import numpy as np

from commsched.cost.models import CostModel
from commsched.sim.semantics import factor_with_call


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

    ``slow_compute`` and ``slow_comm`` are the factors 1 + slowdown (>= 1); beside compute a
    bucket's all-reduce goes at 1 / (``slow_comm`` x (``under_compute(bytes)`` + ``call_overhead_s``
    / T)) (a negative ``call_overhead_s`` no lower than its floor:
    :func:`~commsched.sim.semantics.factor_with_call`; ``under_compute`` maps an array of sizes to
    factors; None is 1; ``min_factor`` is a lower bound of the whole factor, for the pruning
    bounds), as :mod:`commsched.sim.events` does: that is m in
    every formula above for that bucket.
    A factor below 1 makes m < 1, and then :func:`front_search` orders states by f + kappa p
    instead of f (its docstring), so the proof holds. ``upper_bound_s``
    is the end time of any known bucketing; it only prunes, so when nothing beats it the result is
    empty (the caller keeps its bucketing). ``coarse_first``: :func:`certified` (off: the programme
    at ``tolerance`` alone, as the tests of its bound need).
    """
    c, m = float(slow_compute), float(slow_comm)

    def option(_k2: np.ndarray, nbytes: np.ndarray):
        t = cost.times_s(nbytes)
        under = under_compute(nbytes) if under_compute is not None else 1.0
        under = factor_with_call(under, call_overhead_s, t)  # as the simulator
        return t, m * under, c

    # a factor below 1 makes all-reduces under compute cheaper: the bound on what is left shrinks
    # with it (the last all-reduce is launched after compute, so its bound stands)
    scale = min(1.0, min_factor)
    table = transitions(sizes, [option], lambda b: cost.times_s(b) * scale, cost.times_s)

    def search(tol, bound, optimistic, budget):
        return front_search(forward_s, work_s, table, bound, tol, optimistic=optimistic, budget=budget)

    ends, end_s, _ = certified(search, tolerance, upper_bound_s) if coarse_first else search(tolerance, upper_bound_s, False, Budget())
    return ends, end_s


COARSE_TOLERANCE = 1.0
# Candidate transitions (state, bucket, option) one certified search may make: about 5 s on one
# core of the development machine. Measured semantics make fronts large (densenet201 under a gloo
# run's factors took minutes unbounded); past the budget the search keeps what it has found.
SEARCH_BUDGET_PAIRS = 20_000_000
COARSEST_TOLERANCE = 4.0**6  # a grid this coarse keeps about one state per tensor


class OverBudget(Exception):
    """A :func:`front_search` run spent its :class:`Budget`."""


@dataclass
class Budget:
    """Candidate transitions :func:`front_search` may still make (spent as it makes them)."""

    pairs: float = float("inf")

    def spend(self, n: int) -> None:
        self.pairs -= n
        if self.pairs < 0:
            raise OverBudget


def certified(search, tolerance: float, upper_bound_s: float, budget_pairs: float = SEARCH_BUDGET_PAIRS):
    """Within 1 + ``tolerance`` of the optimum, proven by a lower bound rather than by a fine grid.

    ``search(tol, bound, optimistic, budget)`` is :func:`front_search` at ``tol``. Its ordinary run merges
    a cell's states into its real state with the most progress (a bucketing, a result to keep);
    its ``optimistic`` run merges them into a state with the cell's least end and most progress,
    which dominates every state of the cell, so whatever it finds ends no later than the optimum,
    and when it finds nothing under ``bound`` the optimum is above ``bound`` (a state on the optimal
    path is always dominated by a kept one, whose lower bound is no higher, so it is not pruned).

    From :data:`COARSE_TOLERANCE` down, four times finer each round: an ordinary run gives the
    incumbent U (or keeps the caller's ``upper_bound_s``); an optimistic run that finds nothing
    under U / (1 + tolerance) proves U within the tolerance, and then the search stops. At
    ``tolerance`` itself the ordinary run is within it by :func:`front_search`'s own bound, so this
    never ends later than a run at ``tolerance`` (and the rounds before it shrink that run's
    fronts with their incumbent). ``tolerance`` 0: one coarse run for the incumbent, then the exact
    programme.

    All runs together make at most ``budget_pairs`` candidate transitions. When they run out the
    result is the best bucketing found so far, not proven, and a warning says so; when the first
    run finds none within them, runs four times coarser (each with a quarter of the budget) look
    for one, up to :data:`COARSEST_TOLERANCE`."""
    best = ((), float("inf"), ())
    incumbent = upper_bound_s
    tol = max(COARSE_TOLERANCE, tolerance)
    budget = Budget(budget_pairs)
    too_fine = -1.0  # the coarsest grid that ran out of budget
    while True:
        try:
            found = search(tol, incumbent, False, budget)
            if found[0] and found[1] <= incumbent:
                best, incumbent = found, found[1]
            if tol <= tolerance:
                return best
            if tolerance == 0:
                tol = 0.0  # only the exact programme is exact
            elif not search(tol, incumbent / (1 + tolerance), True, budget)[0]:
                return best
            else:
                tol = max(tolerance, tol / 4)
            if tol <= too_fine:
                raise OverBudget  # a grid this fine ran out of budget already
        except OverBudget:
            if best[0] or tol >= COARSEST_TOLERANCE or tol <= too_fine:
                found_one = "its plan is the best found" if best[0] else "it found no bucketing better than the best known one"
                warnings.warn(
                    f"the optimum's search under contention stopped at its budget of {budget_pairs:,.0f} candidate "
                    f"transitions: {found_one}, not proven within {tolerance:g} of the optimum",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return best
            too_fine, tol, budget = tol, tol * 4, Budget(budget_pairs / 4)


@dataclass(frozen=True)
class Transitions:
    """What :func:`front_search` needs of the tensors' sizes and the options, computed once for all
    its runs: per k the options' (T, s, c) for every bucket k..k2-1 and which are useless, the
    lower bounds on the all-reduce time left after each k, and the vertices of the overlap bound
    (:func:`_overlap_vertices`)."""

    per_k: tuple
    comm_left: np.ndarray
    last_left: np.ndarray
    vertices: np.ndarray
    kappa: float = 0.0


def transitions(sizes, options, least_time, least_last_time, drop_dominated=False) -> Transitions:
    """:class:`Transitions` for :func:`front_search` (its docstring says what the arguments are)."""
    n = len(sizes)
    prefix = np.concatenate(([0], np.cumsum(np.asarray(sizes, dtype=np.int64)))).astype(np.float64)
    ks, k2s = np.triu_indices(n + 1, 1)  # every bucket k..k2-1, k ascending then k2
    nbytes = prefix[k2s] - prefix[ks]
    t, slow, c = (
        np.stack([np.broadcast_to(np.asarray(v, dtype=np.float64), nbytes.shape) for v in col])
        for col in zip(*(opt(k2s, nbytes) for opt in options))
    )
    least = np.asarray(least_time(nbytes), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # each option's least compute factor and least factor over least_time beside compute
        overlap = [(float(c[o].min()), float(np.where(least > 0, t[o] * slow[o] / least, np.inf).min())) for o in range(len(options))]
    useless = np.zeros(t.shape, dtype=bool)
    if drop_dominated and len(options) > 1 and slow.min() >= 1.0:
        useless = _dominated(t, slow, c)
    # the exchange rate of progress for time in the dominance order (front_search's docstring)
    kappa = max(0.0, float((c * (1.0 / slow - 1.0)).max())) if slow.size else 0.0
    cuts = np.concatenate(([0], np.cumsum(np.arange(n, 0, -1))))
    per_k = []
    comm_left, last_left = np.zeros(n + 1), np.zeros(n + 1)  # nothing is left after the last tensor
    for k in range(n):
        a, b = cuts[k], cuts[k + 1]
        used = ~useless[:, a:b].all(axis=1)
        per_k.append((np.flatnonzero(used), t[used, a:b], slow[used, a:b], c[used, a:b], useless[used, a:b]))
    for k in range(n - 1, -1, -1):
        # the least total all-reduce time of any bucketing of tensors k..n-1, one after another,
        # and the least time of the all-reduce that holds the last tensor (it starts after compute)
        comm_left[k] = np.min(least[cuts[k] : cuts[k + 1]] + comm_left[k + 1 :])
        tl = float(np.asarray(least_last_time(prefix[n : n + 1] - prefix[k]))[0])
        last_left[k] = min(tl, last_left[k + 1]) if k + 1 < n else tl
    return Transitions(tuple(per_k), comm_left, last_left, _overlap_vertices(overlap), kappa)


def front_search(forward_s, work_s, table: Transitions, upper_bound_s=float("inf"), tolerance=0.0, optimistic=False, budget=None):
    """The programme of the module docstring over bucketings and, per bucket, one of the options of
    ``table`` (:func:`transitions`).

    Each option of :func:`transitions` maps (k2 array, bytes array) of the candidate buckets
    k..k2-1 to (T alone, s, c):
    the all-reduce's work alone, the factor s > 0 by which it is longer while compute runs beside
    it (so T s in flight to its end if compute outlasts it; ``slow_comm`` above) and compute's time
    factor c under it (``slow_compute``); each may be a scalar or an array over the candidates.
    :func:`transitions`' ``least_time(bytes)`` and ``least_last_time(bytes)`` bound any bucket's
    all-reduce and the last one's from below (they prune). Returns (ends, end of the last all-reduce, option index per
    bucket); empty when nothing beats ``upper_bound_s``. ``optimistic``: the relaxation of
    :func:`_front`, whose result is a lower bound (its path is not a real one). ``budget``: a
    :class:`Budget` spent by every candidate transition (:class:`OverBudget` when it runs out).

    The dominance argument of the module docstring needs s >= 1 (an all-reduce never faster beside
    compute than alone, LIBRA's Assumption 2): then the end never rises with progress. Measured
    small all-reduces are faster beside compute (s < 1), and then a state with less progress can
    end its next all-reduce sooner, by at most kappa = max c (1/s - 1) per second of progress. So
    states are ordered by g = f + kappa p instead of f: (f, p) dominates (f', p') when p >= p' and
    g <= g'. By induction over the buckets: the start (s, q) of the next all-reduce keeps the order
    (waiting for compute adds (1 + kappa) (w - p) to g, more for less progress); in flight, the
    end plus kappa times the progress is g at the start plus phi(R) (R the compute left), where
    phi(R) = T + R (kappa - c (1/s - 1)) while R c < T s and T s (1 + kappa / c) after, which
    never falls with R, so more progress (less R) never costs; the progress after is
    min(W, q + T s / c), which keeps the order. At the last tensor every progress is W, so g orders
    the end times. With s >= 1 everywhere, kappa = 0 and this is the order by f.
    :func:`transitions` computes kappa.

    :func:`transitions`' ``drop_dominated`` (needs s >= 1 too): for a bucket, option B makes option A useless when B's
    all-reduce is no longer alone (T_B <= T_A) nor beside compute (T_B s_B <= T_A s_A), slows
    compute no more (c_B <= c_A) and covers at least as much compute while in flight
    (T_B s_B / c_B >= T_A s_A / c_A). Then from any state B's all-reduce is at every moment at least
    as far along as A's (so it ends no later) and compute is at least as far along when it ends
    (in flight to its end: q + T s / c; else all of it), so B's state dominates A's and A's is never
    made. Among options equal in all four, the first is kept.

    Pruning counts what contention costs: per option, the least compute factor c and the least
    factor s of its all-reduce beside compute over ``least_time`` give :func:`_overlap_vertices`.
    ``least_time`` must bound every option's all-reduce from below, alone and beside compute.
    """
    n = len(work_s)
    work = np.concatenate(([0.0], np.cumsum(np.asarray(work_s, dtype=np.float64))))
    total = float(work[n])
    comm_left, last_left, vertices = table.comm_left, table.last_left, table.vertices
    bound = upper_bound_s * (1 + 1e-12)
    # no bucketing ends before compute (forward, all backward) and then the last tensor's all-reduce
    lowest = forward_s + total + float(last_left[0])
    grid = tolerance * lowest / n  # merge states whose end times share a cell this wide (see _front)
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
            pending[dest] = _front(_concat_all([pending[dest], *waiting[dest]]), grid, optimistic, table.kappa)
            waiting[dest], waiting_rows[dest] = [], 0

    final: list[tuple] = [empty] * (n + 1)
    for k in range(n):
        fold(k)
        f, p, nb, _, _, _ = final[k] = pending[k]
        pending[k] = empty
        if f.size == 0:
            continue
        ids, t_j, slow_j, c_j, useless_j = table.per_k[k]
        k2 = np.arange(k + 1, n + 1)
        rows, js = _sources(f, p, nb, work[k2])
        w, f_, p_ = work[k2][js], f[rows], p[rows]
        s = f_ + np.maximum(w - p_, 0.0)  # start of the next all-reduce (transition of the docstring)
        q = np.maximum(p_, w)
        r = total - q
        if budget is not None:  # a destination's bookkeeping costs about as much as 8 transitions
            budget.spend(rows.size * t_j.shape[0] + 8 * k2.size)
        t, slow, c = t_j[:, js], slow_j[:, js], c_j[:, js]  # (options, candidates)
        overlapped = r * c >= t * slow
        f2 = np.where(r <= 0.0, s + t, np.where(overlapped, s + t * slow, s + r * c + (t - r * c / slow)))
        p2 = np.where(overlapped & (r > 0.0), q + t * slow / c, total)
        dest = js + k + 1
        x, y = total - p2, comm_left[dest]  # compute and all-reduce work left, at least
        saving = np.min(x[..., None] * vertices[:, 0] + y[..., None] * vertices[:, 1], axis=-1)
        lower = f2 + np.maximum(np.maximum(y, x + last_left[dest]), x + y - saving)
        lower = np.where(dest == n, f2, lower)  # k2 = n: the last all-reduce has ended
        keep = (lower <= bound) & ~useless_j[:, js]
        # every kept candidate at once, grouped by destination (candidates are in destination
        # order, and so are the options' columns after the transpose)
        cand, opts = np.nonzero(keep.T)
        if cand.size:
            jk = js[cand]
            cols = (f2[opts, cand], p2[opts, cand], nb[rows[cand]] + 1, np.full(cand.size, k), rows[cand], ids[opts])
            cuts = np.flatnonzero(np.diff(jk)) + 1
            starts = np.concatenate(([0], cuts))
            stops = np.concatenate((cuts, [jk.size]))
            for a, b in zip(starts.tolist(), stops.tolist()):
                d = k + 1 + int(jk[a])
                waiting[d].append(tuple(x[a:b] for x in cols))
                waiting_rows[d] += b - a
                if waiting_rows[d] > max(4096, 4 * pending[d][0].size):
                    fold(d)
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


def _overlap_vertices(pairs) -> np.ndarray:
    """Vertices (u, v) of the dual of the most time overlap can save, for :func:`front_search`'s
    pruning bound: with X of compute and Y of all-reduce work (in ``least_time`` units) left,
    the rest takes at least X + Y - S(X, Y), S = min over the vertices of X u + Y v.

    Let option o overlap compute for t_o seconds in all: it does t_o / c_o of compute and at most
    t_o / s_o of all-reduce work, while compute alone and all-reduces alone go at most at rate 1.
    So the rest takes at least sum t_o + (X - sum t_o / c_o) + (Y - sum t_o / s_o), that is
    X + Y - sum t_o g_o with g_o = 1/c_o + 1/s_o - 1, where sum t_o / c_o <= X and
    sum t_o / s_o <= Y. S is that linear programme's maximum of sum t_o g_o; by LP duality it is
    min X u + Y v over u, v >= 0 with u / c_o + v / s_o >= g_o for every o, attained at a vertex of
    that region (each a pair of its boundary lines meeting; (0, 0) when no g_o is positive). One
    option gives g min(X c, Y s), the bound of LIBRA's single overlap rate. Built once per search:
    at most options + 2 vertices."""
    a = np.array([1.0 / c for c, _ in pairs], dtype=np.float64)
    b = np.array([1.0 / s for _, s in pairs], dtype=np.float64)
    g = a + b - 1.0
    if not (g > 0).any():
        return np.zeros((1, 2))
    lines = [(ai, bi, gi) for ai, bi, gi in zip(a, b, g)] + [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]  # the axes u = 0, v = 0
    points = []
    for i in range(len(lines)):
        for j in range(i + 1, len(lines)):
            (a1, b1, g1), (a2, b2, g2) = lines[i], lines[j]
            det = a1 * b2 - a2 * b1
            if det != 0.0:
                points.append(((g1 * b2 - g2 * b1) / det, (a1 * g2 - a2 * g1) / det))
    pts = np.array(points)
    slack = 1e-12 * max(1.0, float(np.abs(pts).max()))
    feasible = (pts >= -slack).all(axis=1) & (pts[:, :1] * a + pts[:, 1:] * b >= g - slack).all(axis=1)
    return np.maximum(pts[feasible], 0.0)


def _sources(f: np.ndarray, p: np.ndarray, nb: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (state, destination) pairs worth extending: (rows, js), grouped by destination index j.

    ``f``, ``p``, ``nb``: a front, progress ascending; ``w``: work through each destination's last
    tensor, non-decreasing. A state with p < w waits for compute to reach w: its next all-reduce
    starts at f + w - p with progress w, so everything after depends on the state through f - p
    alone, as a shift; of those states only the one with the least f - p (then fewest buckets) can
    be on an optimal path, and it is a prefix minimum (p ascending). States with p >= w (the bucket
    was ready before the last all-reduce ended) are all kept: they are a suffix of the front."""
    size = f.size
    idx = np.searchsorted(p, w, side="left")  # states with p < w_j are rows [0, idx_j)
    key = np.lexsort((nb, f - p))  # rank by least f - p, then fewest buckets
    rank = np.empty(size, np.int64)
    rank[key] = np.arange(size)
    best = key[np.minimum.accumulate(rank)]  # best[i]: the best of rows 0..i
    has = idx > 0
    counts = size - idx + has
    js = np.repeat(np.arange(w.size), counts)
    start = np.cumsum(counts) - counts
    rows = np.repeat(idx - has, counts) + (np.arange(js.size) - np.repeat(start, counts))
    rows[start[has]] = best[idx[has] - 1]
    return rows, js


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


def _front(front: tuple, grid: float, optimistic: bool = False, kappa: float = 0.0) -> tuple:
    """:func:`_pareto`, then of the states whose g = f + ``kappa`` p (the end time when kappa is 0;
    :func:`front_search`) falls in one cell ``grid`` seconds wide, the one with the most progress
    (on a Pareto front sorted by g progress rises too: a cell's last state). A dropped state (f, p)
    leaves one (g' < g + grid, p' >= p), which dominates the dropped state moved ``grid`` later,
    whose every continuation ends exactly ``grid`` later (the end time shifts by exactly the shift
    of f): over a path of at most L buckets the result is at most L x grid above the optimum.

    ``optimistic``: the cell's state becomes (its least g, its most progress) instead, which
    dominates every state of the cell: a relaxation whose result is a lower bound (:func:`certified`).
    """
    front = _pareto(front, kappa)
    f, p = front[0], front[1]
    if grid <= 0.0 or f.size <= 1:
        return front
    g = f + kappa * p if kappa else f
    cell = np.floor(g / grid)
    last = np.ones(f.size, dtype=bool)
    last[:-1] = cell[1:] != cell[:-1]
    kept = tuple(x[last] for x in front)
    if optimistic:
        first = np.ones(f.size, dtype=bool)
        first[1:] = last[:-1]
        return (g[first] - kappa * kept[1],) + kept[1:]
    return kept


def _pareto(front: tuple, kappa: float = 0.0) -> tuple:
    """The states no other state dominates: by g = f + ``kappa`` p, each with more progress than
    every earlier one (on equal g and progress, the fewest buckets first)."""
    f, p, nb = front[0], front[1], front[2]
    if f.size <= 1:
        return front
    order = np.lexsort((nb, -p, f + kappa * p if kappa else f))
    p_sorted = p[order]
    best_before = np.maximum.accumulate(np.concatenate(([-np.inf], p_sorted[:-1])))
    kept = order[p_sorted > best_before]
    return tuple(x[kept] for x in front)
