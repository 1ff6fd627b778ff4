"""The exact optimum: the contiguous bucketing with the least iteration time under the simulator.

Let f(i) be the earliest time the all-reduces of the first i tensors (in ready order) can end, over
all bucketings of them, and S the prefix sums of bytes, r_i the ready time of tensor i-1. Since the
simulator's end time is non-decreasing in the previous end time, the principle of optimality gives

    f(0) = 0,   f(i) = min_{k < i}  max(f(k), r_i) + T(S_i - S_k),

and the iteration time is f(L) (+ optimizer). This is exact for *any* cost T; evaluated over all k
it costs O(L^2), which is the fallback for a cost model that is not non-decreasing.

When T never decreases with size (every physical model), two facts make it fast:

1. f is non-decreasing in i (drop tensor i from the last bucket of an optimal schedule for i+1
   tensors: the bucket gets no larger and no later), so the k with f(k) <= r_i form a prefix [0, p).
   Among them the cost is r_i + T(S_i - S_k), least for the largest, k = p-1: a single candidate.
   p only grows with i, so one pointer finds it in amortised O(1).
2. For k >= p the value is f(k) + T(S_i - S_k) >= f(k) + T(bytes of tensor i-1). With ``best`` the
   value so far, any k with f(k) >= best - T(bytes_{i-1}) cannot win, and since f is sorted those k
   form a suffix: only the window [p, q) needs evaluating (vectorised), q by binary search.

The window is empty whenever communication keeps up with compute, and short where it does not, so
the typical cost is close to O(L log L); the worst case stays O(L^2) (BENCHMARKS.md measures one).

For a cost linear in bytes, T(x) = a + b x (alpha-beta and every Table II algorithm), the window
term is min_k (f(k) - b S_k) + a + b S_i over k in [p, i): a sliding-window minimum whose ends both
only move right, kept in a monotone deque, so the whole programme is O(L).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from commsched.cost.models import AlphaBeta, CostModel, as_alpha_beta
from commsched.errors import CommschedError
from commsched.planners.optimal_contended import contended_optimal_ends
from commsched.sim.events import contended_end_s, simulate_run
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import prefix_bytes
from commsched.types import ModelProfile

# What ``validate``, ``plan_for`` and ``commsched plan`` ask of a plan before they recommend it over
# stock DDP's default buckets (:func:`commsched.planners.compare.recommend`): the 90th percentile (2.7%) of the error of fused plans' predicted ratio to
# stock DDP's defaults, over the stored emulated-cluster runs of seven models at 500 Mbit/s and
# 2 Gbit/s (``benchmarks/investigations/launch_ratio_check.py``, BENCHMARKS.md, "Keep stock DDP's buckets unless").
MIN_GAIN_OVER_DDP = 0.03
_VECTOR_WINDOW = 24  # below this many candidates a Python loop beats a numpy call


def optimal_ends(ready: list[float] | tuple[float, ...], sizes: list[int], cost: CostModel) -> tuple[tuple[int, ...], float]:
    """Bucket ends of an optimal bucketing and its communication end time f(L)."""
    prefix = [0] * (len(sizes) + 1)
    for i, b in enumerate(sizes):
        prefix[i + 1] = prefix[i] + b
    if not cost.nondecreasing:
        return _exhaustive(ready, prefix, cost)
    linear = as_alpha_beta(cost)
    if linear is not None:
        return _linear(ready, prefix, linear)
    return _pruned(ready, prefix, cost)


def _pruned(ready, prefix: list[int], cost: CostModel) -> tuple[tuple[int, ...], float]:
    n = len(ready)
    f = [0.0] * (n + 1)
    choice = [0] * (n + 1)
    prefix_np = np.asarray(prefix, dtype=np.float64)
    f_np = np.zeros(n + 1)
    time_s = cost.time_s
    p = 1  # f[0..p-1] <= r for the current r; f[0] = 0 <= every ready time
    for i in range(1, n + 1):
        r = ready[i - 1]
        while p < i and f[p] <= r:
            p += 1
        s_i = prefix[i]
        best = r + time_s(s_i - prefix[p - 1])
        arg = p - 1
        if p < i:
            bound = best - time_s(s_i - prefix[i - 1])
            q = bisect.bisect_left(f, bound, p, i)
            if q - p >= _VECTOR_WINDOW:
                vals = f_np[p:q] + cost.times_s(s_i - prefix_np[p:q])
                j = int(np.argmin(vals))
                if vals[j] < best:
                    best, arg = float(vals[j]), p + j
            else:
                for k in range(p, q):
                    v = f[k] + time_s(s_i - prefix[k])
                    if v < best:
                        best, arg = v, k
        f[i] = best
        f_np[i] = best
        choice[i] = arg
    return _backtrack(choice, n), f[n]


def _linear(ready, prefix: list[int], cost: AlphaBeta) -> tuple[tuple[int, ...], float]:
    n = len(ready)
    a, b = cost.alpha_s, cost.beta_s_per_byte
    f = [0.0] * (n + 1)
    g = [0.0] * (n + 1)  # g(k) = f(k) - b S_k
    choice = [0] * (n + 1)
    window: deque[int] = deque()  # indices k in [p, i) with increasing g
    p = 1
    for i in range(1, n + 1):
        k = i - 1
        if k >= 1:
            while window and g[window[-1]] >= g[k]:
                window.pop()
            window.append(k)
        r = ready[i - 1]
        while p < i and f[p] <= r:
            p += 1
        while window and window[0] < p:
            window.popleft()
        best = r + a + b * (prefix[i] - prefix[p - 1])
        arg = p - 1
        if window:
            v = g[window[0]] + a + b * prefix[i]
            if v < best:
                best, arg = v, window[0]
        f[i] = best
        g[i] = best - b * prefix[i]
        choice[i] = arg
    return _backtrack(choice, n), f[n]


def _exhaustive(ready, prefix: list[int], cost: CostModel) -> tuple[tuple[int, ...], float]:
    n = len(ready)
    prefix_np = np.asarray(prefix, dtype=np.float64)
    f = np.zeros(n + 1)
    choice = [0] * (n + 1)
    for i in range(1, n + 1):
        vals = np.maximum(f[:i], ready[i - 1]) + cost.times_s(prefix_np[i] - prefix_np[:i])
        k = int(np.argmin(vals))
        f[i], choice[i] = vals[k], k
    return _backtrack(choice, n), float(f[n])


def _backtrack(choice: list[int], n: int) -> tuple[int, ...]:
    ends = []
    i = n
    while i > 0:
        ends.append(i)
        i = choice[i]
    return tuple(reversed(ends))


def check_min_gain(v: object, what: str = "min_gain") -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:  # NaN too
        raise CommschedError(f"{what} must be a fraction in [0, 1), got {v!r}")


def published_ends(profile: ModelProfile, cost: CostModel) -> list[tuple[int, ...]]:
    """The bucketings of the published strategies at their defaults (the other rows of ``plan``'s
    table): WFBP, SyncEASGD, stock DDP, Horovod (both), MG-WFBP and adaFusion."""
    from commsched.planners.adafusion import AdaFusion
    from commsched.planners.horovod import Horovod, horovod_legacy
    from commsched.planners.mgwfbp import MGWFBP
    from commsched.planners.simple import WFBP, SyncEASGD
    from commsched.planners.stock_ddp import DDP

    return [p.ends(profile, cost) for p in (WFBP(), SyncEASGD(), DDP(), Horovod(), horovod_legacy(), MGWFBP(), AdaFusion())]


def check_tolerance(v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise CommschedError(f"tolerance must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True)
class Optimal:
    """The least iteration time over all contiguous bucketings, under ``semantics``.

    - Without contention, on one thread or on threads that share the link without gain (NCCL; gloo
      as measured here), the optimum is that of the simulator of docs/design.md, found exactly by the
      programme above (for gloo by :attr:`Semantics.serial_equivalent`: the iteration time is the
      serial one for every bucketing, so the serial optimum is gloo's optimum).
    - With contention (:mod:`commsched.sim.events`, as ``validate`` measures it), likewise on
      such runtimes, by :mod:`commsched.planners.optimal_contended`, to within a factor 1 +
      ``tolerance`` (a proven bound; 0 asks for the exact optimum, which can take far longer),
      unless the search runs out of its budget
      (:data:`~commsched.planners.optimal_contended.SEARCH_BUDGET_PAIRS`; a warning says so).
    - On threads with a concurrency gain (a runtime whose concurrent all-reduces do not just share
      one link), whose concurrent all-reduces slow compute more than one does, or whose
      all-reduces slow down under compute by factors that differ with size (gloo as ``validate``
      measures it: a small all-reduce beside a large one keeps its own speed), or whose bucket
      launches cost compute (``launch_compute_s``: the programme's state would need the bucket count),
      no exact programme is implemented: the result is the best under the real semantics of the serial optimum
      (planned with the one-in-flight compute slowdown), the plain optimum and the published
      strategies' plans (:func:`published_ends`), and :meth:`exact_for` says so.

    Under contention the published strategies' plans are candidates in every case, so the result is
    never predicted slower than one of them.

    It is always the optimum (as far as :meth:`exact_for` says): whether to *run* it rather than
    stock DDP's default buckets is the recommendation's call (:func:`commsched.planners.compare.recommend`,
    which asks a predicted gain of at least :data:`MIN_GAIN_OVER_DDP`).
    """

    semantics: Semantics = NCCL
    tolerance: float = 0.01
    name: str = "optimal"

    def __post_init__(self) -> None:
        if not isinstance(self.semantics, Semantics):
            raise CommschedError(f"semantics must be a Semantics, got {type(self.semantics).__name__}")
        check_tolerance(self.tolerance)

    def exact_for(self) -> str:
        """How the result relates to the optimum under ``semantics``."""
        if not self.semantics.serial_equivalent or self.semantics.launch_compute_s:
            return (
                "not proven: the best of the serial optimum, the plain optimum and the published strategies' plans (concurrent "
                "all-reduces gain, slow compute more than one, or slow down by size under compute; or launches cost compute)"
            )
        if not self.semantics.contended:
            return "exact"
        return "exact" if self.tolerance == 0 else f"within {self.tolerance:g} of the optimum"

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        sem = self.semantics
        sizes = [t.bytes for t in profile.tensors]
        plain, _ = optimal_ends(profile.ready_s, sizes, cost)
        if not sem.contended:
            if sem.serial_equivalent and not sem.launch_compute_s:
                return plain  # exact
            best = plain
        else:
            best = self._serial_optimum(profile, cost, plain)
        # where no programme is exact, or its search is within a tolerance or ran out of budget,
        # the published strategies' plans are candidates too (the optimum never loses to one of
        # them), all scored as the runtime runs them
        candidates = {best, plain, *published_ends(profile, cost)}
        return min((simulate_run(profile, e, cost, sem).iteration_s, len(e), e) for e in candidates)[2]

    def _serial_optimum(self, profile: ModelProfile, cost: CostModel, plain: tuple[int, ...]) -> tuple[int, ...]:
        """The optimum of the serial run under this contention, without launch costs (what
        :mod:`~commsched.planners.optimal_contended` solves)."""
        sem = self.semantics
        sizes = [t.bytes for t in profile.tensors]
        serial = replace(sem, backend="nccl", threads=1, concurrency_gain=0.0, compute_slowdown_concurrent=None, launch_compute_s=0.0)
        work = [t.backward_s for t in profile.tensors]
        prefix = prefix_bytes(profile)
        # the better of the plain optimum and one bucket bounds the search (it prunes, never decides)
        known = min((contended_end_s(profile.forward_s, work, prefix, e, cost, serial), len(e), e) for e in (plain, (len(work),)))
        ends, end_s = contended_optimal_ends(
            profile.forward_s,
            work,
            sizes,
            cost,
            1.0 + sem.compute_slowdown,
            1.0 + sem.comm_slowdown,
            upper_bound_s=known[0],
            tolerance=self.tolerance,
            call_overhead_s=sem.call_overhead_s,
            under_compute=sem.bucket_factor if sem.under_compute or sem.launch_factor_points else None,
            min_factor=sem.min_factor_under_compute,
        )
        return ends if ends and end_s <= known[0] else known[2]
