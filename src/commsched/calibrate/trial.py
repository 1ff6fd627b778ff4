"""The trial of a plan against stock DDP's defaults inside a training job, and its verdict. Pure.

The job alternates blocks of ``block`` steps: stock DDP's defaults, then the plan, then stock again
(A B A B ...). Each pair of blocks gives one ratio, stock's mean step over the plan's (the two ran
seconds apart, so the machine's drift between minutes cancels, as in ``validate``'s paired
speedup). After each pair :func:`verdict` says whether to go on:

- ``"stock"`` once at least ``min_pairs_reject`` pairs are in and the 95% bootstrap interval of the
  median ratio lies below 1 (the plan measured slower: stop paying for it), or at ``max_pairs``
  when the interval does not lie above 1;
- ``"plan"`` once at least ``min_pairs_keep`` pairs are in and the interval lies above 1;
- ``None``: another pair.

A plan is kept only with its interval above 1: the user's bar is never to be slower than stock DDP.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Literal, Sequence

from commsched.calibrate.bootstrap import interval95
from commsched.errors import CommschedError

Verdict = Literal["plan", "stock"]


@dataclass(frozen=True)
class TrialRule:
    """How long a trial runs and when it stops (steps are the job's own, each counted once)."""

    block: int = 2  # steps per block (one variant, back to back)
    min_pairs_reject: int = 3
    min_pairs_keep: int = 6
    max_pairs: int = 16
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        for k in ("block", "min_pairs_reject", "min_pairs_keep", "max_pairs", "resamples"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CommschedError(f"TrialRule.{k} must be a positive whole number, got {v!r}")
        if not self.min_pairs_reject <= self.max_pairs or not self.min_pairs_keep <= self.max_pairs:
            raise CommschedError(
                f"TrialRule needs min_pairs_reject ({self.min_pairs_reject}) and min_pairs_keep ({self.min_pairs_keep}) "
                f"at most max_pairs ({self.max_pairs})"
            )

    @property
    def max_steps(self) -> int:
        """Steps the longest trial takes (both variants)."""
        return 2 * self.block * self.max_pairs


def pair_ratios(stock_blocks: Sequence[Sequence[float]], plan_blocks: Sequence[Sequence[float]]) -> list[float]:
    """Per pair of blocks, stock's mean step over the plan's (> 1: the plan is faster)."""
    n = min(len(stock_blocks), len(plan_blocks))
    return [statistics.fmean(stock_blocks[k]) / statistics.fmean(plan_blocks[k]) for k in range(n)]


def speedup_interval(ratios: Sequence[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(median ratio, 95% bootstrap interval of the median): resampling pairs with replacement."""
    if not ratios:
        raise CommschedError("no pairs of blocks measured")
    rng = random.Random(seed)
    n = len(ratios)
    lo, hi = interval95([statistics.median(ratios[rng.randrange(n)] for _ in range(n)) for _ in range(resamples)])
    return statistics.median(ratios), lo, hi


def verdict(ratios: Sequence[float], rule: TrialRule) -> Verdict | None:
    """What to keep after these pairs, or None to measure another pair (module docstring)."""
    if not ratios:
        return None
    _, lo, hi = speedup_interval(ratios, rule.resamples, rule.seed)
    return verdict_of(len(ratios), lo, hi, rule)


def verdict_of(pairs: int, lo: float, hi: float, rule: TrialRule) -> Verdict | None:
    """:func:`verdict` from the number of pairs and the interval already computed."""
    if pairs >= rule.min_pairs_keep and lo > 1.0:
        return "plan"
    if pairs >= rule.min_pairs_reject and hi < 1.0:
        return "stock"
    if pairs >= rule.max_pairs:
        return "plan" if lo > 1.0 else "stock"
    return None
