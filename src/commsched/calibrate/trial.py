"""The trial of a plan against stock DDP's defaults inside a training job, and its verdict. Pure.

The job alternates blocks of ``block`` steps: stock DDP's defaults, then the plan, then stock again
(A B A B ...). Each pair of blocks gives one ratio, stock's mean step over the plan's (the two ran
seconds apart, so the machine's drift between minutes cancels, as in ``validate``'s paired
speedup). After each pair :func:`verdict` says whether to go on:

- ``"stock"`` once at least ``min_pairs_reject`` pairs are in and the 95% bootstrap interval of the
  median ratio lies below 1 (the plan measured slower: stop paying for it), or at ``max_pairs``
  when the interval does not lie above 1;
- ``"plan"`` once at least ``min_pairs_keep`` pairs are in and the interval lies above 1, or,
  for a clear gain, once ``min_pairs_clear`` pairs are in and both that interval and the Student-t
  99% interval of the mean log ratio (:func:`t_interval`) lie above 1;
- in a race, where the baseline is a plan that already measured faster than stock DDP's defaults,
  also ``"stock"`` (the baseline stays) once at least ``min_pairs_reject`` pairs are in and the
  median ratio is not above 1: the challenger shows no gain, and the baseline is the safe choice;
- ``None``: another pair.

A plan is kept only with its interval above 1: the user's bar is never to be slower than stock DDP.
Why a second interval for clear gains: every step of a trial's baseline that is stock DDP's defaults
costs the job what the plan would have saved, and with 3 pairs the bootstrap's interval is just
their extremes, too weak a test alone (three ratios above 1 happen one time in eight with no gain
at all). The t interval at 3 pairs needs the mean log ratio 5.7 times the pairs' standard deviation
above 0: where the plan is clearly faster (most stored trials of BENCHMARKS.md section 11 with gains
of 4-26% over stock DDP's defaults, pairs a few percent apart) it stops the trial at 3 pairs, not 6; a
noisy or small gain (an outlier widens it) still waits for ``min_pairs_keep``. 99%, not 95%: the
rule looks at 3, 4 and 5 pairs, and at 95% it kept a plan no faster than stock DDP early in 3.7% of
simulated trials (3% noise), at 99% in 0.7%.

Why races drop a challenger whose median is not above 1: a race's steps run either the winner so
far or the challenger, and a challenger as fast or slower ran to 16 pairs (64 steps) whenever the
noise kept its interval across 1. Replayed on the 28 stored races of BENCHMARKS.md section 11,
the rule changes no outcome (every challenger that won had its median above 1 from its third pair
on) and ends them 102 pairs sooner in all.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Literal, Sequence

from commsched.calibrate.bootstrap import interval95
from commsched.errors import CommschedError

Verdict = Literal["plan", "stock"]
MIN_RESAMPLES = 100  # a 95% interval then leaves 2 off each end; under 40, none


@dataclass(frozen=True)
class TrialRule:
    """How long a trial runs and when it stops (steps are the job's own, each counted once)."""

    block: int = 2  # steps per block (one variant, back to back)
    min_pairs_reject: int = 3
    min_pairs_keep: int = 6
    min_pairs_clear: int = 3  # a clear gain (both intervals above 1) is kept from this many pairs
    max_pairs: int = 16
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        for k in ("block", "min_pairs_reject", "min_pairs_keep", "min_pairs_clear", "max_pairs", "resamples"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CommschedError(f"TrialRule.{k} must be a positive whole number, got {v!r}")
        if self.resamples < MIN_RESAMPLES:
            raise CommschedError(
                f"TrialRule.resamples must be at least {MIN_RESAMPLES} (its 95% interval leaves 2.5% of them off each end), got {self.resamples}"
            )
        if self.min_pairs_clear < 2:
            raise CommschedError(f"TrialRule.min_pairs_clear must be at least 2 (a t interval needs a spread), got {self.min_pairs_clear}")
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


# Student's t distribution's 0.995 quantile for 1..30 degrees of freedom (any t table; equal to
# scipy.stats.t.ppf(0.995, df) to 3 decimals, which tests/property/test_trial.py checks); beyond 30
# the normal's 2.576 is within 3%, and the bootstrap rule decides there anyway.
T995 = (
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
    2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750,
)


def t_interval(ratios: Sequence[float]) -> tuple[float, float]:
    """The Student-t 99% interval of the geometric mean ratio: exp of mean(log r) -/+ t(0.995, n - 1)
    x sd(log r) / sqrt(n). Logs: a gain and the same loss (1.25 and 0.8) lie as far from 0."""
    n = len(ratios)
    if n < 2:
        raise CommschedError(f"a t interval needs at least 2 pairs, got {n}")
    if any(not (r > 0 and math.isfinite(r)) for r in ratios):
        raise CommschedError(f"pair ratios must be finite and positive, got {list(ratios)}")
    logs = [math.log(r) for r in ratios]
    mean, half = statistics.fmean(logs), (T995[n - 2] if n - 1 <= len(T995) else 2.576) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean - half), math.exp(mean + half)


def verdict(ratios: Sequence[float], rule: TrialRule, race: bool = False) -> Verdict | None:
    """What to keep after these pairs, or None to measure another pair (module docstring); ``race``:
    the baseline is a plan that measured faster than stock DDP's defaults, not those defaults."""
    if not ratios:
        return None
    med, lo, hi = speedup_interval(ratios, rule.resamples, rule.seed)
    return verdict_of(len(ratios), lo, hi, rule, clear_lo=clear_lower(ratios, rule), median=med if race else None)


def clear_lower(ratios: Sequence[float], rule: TrialRule) -> float | None:
    """The t interval's lower end where it can decide (``min_pairs_clear`` pairs in, fewer than
    ``min_pairs_keep``, every ratio finite and positive), else None: a step timed as nothing or
    NaN leaves the decision to the bootstrap rule, as before, rather than stopping the job."""
    if not rule.min_pairs_clear <= len(ratios) < rule.min_pairs_keep:
        return None
    try:
        return t_interval(ratios)[0]
    except CommschedError:  # a ratio that is not finite and positive
        return None


def verdict_of(
    pairs: int, lo: float, hi: float, rule: TrialRule, clear_lo: float | None = None, median: float | None = None
) -> Verdict | None:
    """:func:`verdict` from the number of pairs and the intervals already computed (``clear_lo``:
    :func:`clear_lower`; ``median``: the median ratio, given only in a race)."""
    if pairs >= rule.min_pairs_keep and lo > 1.0:
        return "plan"
    if clear_lo is not None and lo > 1.0 and clear_lo > 1.0:  # clear_lo is given only from min_pairs_clear pairs on
        return "plan"
    if pairs >= rule.min_pairs_reject and hi < 1.0:
        return "stock"
    if median is not None and pairs >= rule.min_pairs_reject and not median > 1.0:
        return "stock"
    if pairs >= rule.max_pairs:
        return "plan" if lo > 1.0 else "stock"
    return None
