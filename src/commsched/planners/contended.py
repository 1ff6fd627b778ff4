"""A bucketing for the contention-aware simulator: local search seeded with every other planner.

`optimal` is exact for DESIGN.md's simulator, where an all-reduce never slows compute. When it does
(:mod:`commsched.sim.contention`: compute at 1 / (1 + compute_slowdown) of its speed while an
all-reduce is in flight, the simplest form of LIBRA's g(b, r)), a bucket's start depends on how
much earlier communication delayed the backward pass, and the principle of optimality behind
`optimal`'s recurrence no longer holds: two schedules that end the same bucket at the same time can
differ in how far compute has come. This planner does not claim the optimum there. It scores every
other planner's bucketing (the plain optimum, WFBP, SyncEASGD, DDP, Horovod, MG-WFBP, adaFusion)
with the contention-aware simulator, keeps the best, then improves it by local search until no
move helps: move one bucket boundary anywhere between its neighbours or drop it (merge two
buckets), or add one boundary (split a bucket); each pass takes the best move of each kind. So
its plan is never predicted slower than any of theirs; with both slowdowns 0 it is the plain
optimum. One evaluation is O(L + B); a pass is O(L) evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.planners.adafusion import AdaFusion
from commsched.planners.ddp import DDP
from commsched.planners.horovod import Horovod, horovod_legacy
from commsched.planners.mgwfbp import MGWFBP
from commsched.planners.optimal import Optimal
from commsched.planners.simple import WFBP, SyncEASGD
from commsched.sim.contention import contended_end_s
from commsched.sim.timeline import prefix_bytes
from commsched.types import ModelProfile

_SEEDS = (Optimal(), WFBP(), SyncEASGD(), DDP(), Horovod(), horovod_legacy(), MGWFBP(), AdaFusion())


@dataclass(frozen=True)
class Contended:
    """Least predicted iteration under measured contention, by seeded local search (module docstring)."""

    compute_slowdown: float = 0.0
    comm_slowdown: float = 0.0
    max_passes: int = 200
    name: str = "contended"

    def __post_init__(self) -> None:
        for what in ("compute_slowdown", "comm_slowdown"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise CommschedError(f"{what} must be a finite number >= 0, got {v!r}")
        if isinstance(self.max_passes, bool) or not isinstance(self.max_passes, int) or self.max_passes < 1:
            raise CommschedError(f"max_passes must be a positive integer, got {self.max_passes!r}")

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        work = [t.backward_s for t in profile.tensors]
        prefix = prefix_bytes(profile)
        slow_compute, slow_comm = 1.0 + self.compute_slowdown, 1.0 + self.comm_slowdown

        def score(ends: tuple[int, ...]) -> float:
            return contended_end_s(profile.forward_s, work, prefix, ends, cost, slow_compute, slow_comm)

        seeds = {seed.ends(profile, cost) for seed in _SEEDS}
        start = min(((score(e), len(e), e) for e in seeds))[2]
        return _local_search(start, len(work), score, self.max_passes)


def _best(trials: list[tuple[int, ...]], score) -> tuple[float, tuple[int, ...]]:
    """The least score among ``trials``; ties go to fewer buckets, then the smaller ends."""
    value, _, ends = min((score(e), len(e), e) for e in trials)
    return value, ends


def _local_search(ends: tuple[int, ...], n: int, score, max_passes: int) -> tuple[int, ...]:
    """Best-improvement descent over single-boundary moves; strict improvements only, so it stops."""
    best = score(ends)
    for _ in range(max_passes):
        improved = False
        j = 0
        while j < len(ends) - 1:  # the last end is n, fixed
            lo, hi = ends[j - 1] if j else 0, ends[j + 1]
            merge = ends[:j] + ends[j + 1 :]  # buckets j and j + 1 become one
            moves = [ends[:j] + (pos,) + ends[j + 1 :] for pos in range(lo + 1, hi) if pos != ends[j]]
            value, cand = _best([merge, *moves], score)
            if value < best:
                best, improved = value, True
                merged = len(cand) < len(ends)
                ends = cand
                if merged:
                    continue  # index j now holds the next boundary
            j += 1
        present = set(ends)
        splits = [tuple(sorted((*ends, pos))) for pos in range(1, n) if pos not in present]
        if splits:
            value, cand = _best(splits, score)
            if value < best:
                ends, best, improved = cand, value, True
        if not improved:
            break
    return ends
