"""The trial's verdict (commsched.calibrate.trial): a plan is kept only with its interval above 1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import math
import random
import statistics

from commsched.calibrate.trial import T995, TrialRule, pair_ratios, speedup_interval, t_interval, verdict
from commsched.errors import CommschedError

RULE = TrialRule(resamples=300)
ratios = st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=0, max_size=RULE.max_pairs)


@settings(max_examples=150, deadline=None)
@given(ratios)
def test_a_plan_is_kept_only_with_its_interval_above_one(rs):
    v = verdict(rs, RULE)
    if v == "plan":
        _, lo, _ = speedup_interval(rs, RULE.resamples, RULE.seed)
        assert lo > 1.0 and len(rs) >= RULE.min_pairs_clear
        if len(rs) < RULE.min_pairs_keep:  # before min_pairs_keep only a clear gain: its t interval above 1 too
            assert t_interval(rs)[0] > 1.0
    if v == "stock" and len(rs) < RULE.max_pairs:
        _, _, hi = speedup_interval(rs, RULE.resamples, RULE.seed)
        assert hi < 1.0 and len(rs) >= RULE.min_pairs_reject


@settings(max_examples=100, deadline=None)
@given(ratios)
def test_a_race_keeps_its_baseline_unless_the_challenger_shows_a_gain(rs):
    """In a race (the baseline already beat stock DDP) the challenger is dropped from 3 pairs on
    when its median is not above 1; otherwise the verdict is the plain rule's."""
    med = speedup_interval(rs, RULE.resamples, RULE.seed)[0] if rs else None
    v = verdict(rs, RULE, race=True)
    if len(rs) >= RULE.min_pairs_reject and not med > 1.0:
        assert v == "stock"
    else:
        assert v == verdict(rs, RULE)


def test_a_tie_ends_a_race_after_three_pairs_but_not_a_trial_against_stock_ddp():
    tie = [1.004, 0.995, 0.998, 1.003]
    assert verdict(tie[:2], RULE, race=True) is None
    assert verdict(tie[:3], RULE, race=True) == "stock"
    assert verdict(tie[:3], RULE) is None  # against stock DDP's defaults: measured on


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=RULE.max_pairs, max_size=RULE.max_pairs))
def test_the_trial_always_ends_by_max_pairs(rs):
    assert verdict(rs, RULE) in ("plan", "stock")


@given(st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=0, max_size=RULE.min_pairs_reject - 1))
def test_no_verdict_before_the_fewest_pairs(rs):
    assert verdict(rs, RULE) is None


def test_clear_gains_and_losses_stop_early():
    assert verdict([1.2, 1.15, 1.18, 1.21, 1.17, 1.19], RULE) == "plan"
    assert verdict([1.2, 1.15, 1.18], RULE) == "plan"  # a clear gain: kept after min_pairs_clear pairs
    assert verdict([1.2, 1.15], RULE) is None
    # every pair above 1, but spread: the t interval reaches below 1, so it waits for min_pairs_keep
    assert t_interval([1.01, 1.06, 1.02, 1.11])[0] < 1.0
    assert verdict([1.01, 1.06, 1.02, 1.11], RULE) is None
    assert verdict([1.01, 1.06, 1.02, 1.11, 1.04, 1.05], RULE) == "plan"
    assert verdict([0.8, 0.85, 0.83], RULE) == "stock"
    # noise around 1: measured to the end, then stock DDP is kept
    noisy = [1.05, 0.95, 1.04, 0.97, 1.02, 0.99] * 3
    assert all(verdict(noisy[:n], RULE) is None for n in range(1, RULE.max_pairs))
    assert verdict(noisy[: RULE.max_pairs], RULE) == "stock"


def test_pair_ratios_are_stock_over_plan():
    assert pair_ratios([[2.0, 2.0], [3.0, 1.0]], [[1.0, 1.0], [2.0, 2.0]]) == [2.0, 1.0]
    med, lo, hi = speedup_interval([1.0, 2.0, 3.0])
    assert med == 2.0 and 1.0 <= lo <= med <= hi <= 3.0
    with pytest.raises(CommschedError):
        speedup_interval([])


@pytest.mark.parametrize("kwargs", [{"block": 0}, {"max_pairs": 2, "min_pairs_keep": 3}, {"resamples": True}, {"min_pairs_reject": 1.5}, {"min_pairs_clear": 1}])
def test_bad_rules_name_the_value(kwargs):
    with pytest.raises(CommschedError, match="TrialRule"):
        TrialRule(**kwargs)


def test_the_t_table_is_students():
    from scipy.stats import t

    assert all(abs(T995[df - 1] - t.ppf(0.995, df)) < 1e-3 for df in range(1, len(T995) + 1))
    lo, hi = t_interval([1.1, 1.2, 1.3])
    logs = [math.log(r) for r in (1.1, 1.2, 1.3)]
    mean, sd = sum(logs) / 3, (sum((x - sum(logs) / 3) ** 2 for x in logs) / 2) ** 0.5
    assert lo == pytest.approx(math.exp(mean - t.ppf(0.995, 2) * sd / 3**0.5), rel=1e-3)
    assert hi == pytest.approx(math.exp(mean + t.ppf(0.995, 2) * sd / 3**0.5), rel=1e-3)
    for bad in ([1.1], [1.1, 0.0], [1.1, float("nan")]):
        with pytest.raises(CommschedError):
            t_interval(bad)
    # in a trial such a ratio leaves the verdict to the bootstrap rule
    assert verdict([1.2, 1.2, float("inf")], RULE) is None and verdict([1.2, 1.2, float("nan")], RULE) is None


def _trials(truth: float, noise: float, n: int = 300) -> list[tuple[str, int]]:
    """n simulated trials to their verdict: pair ratios log-normal around ``truth``."""
    rule, rng, out = TrialRule(resamples=300), random.Random(7), []
    for _ in range(n):
        rs: list[float] = []
        while (v := verdict(rs, rule)) is None:
            rs.append(truth * math.exp(rng.gauss(0.0, noise)))
        out.append((v, len(rs)))
    return out


@pytest.mark.parametrize("truth", [0.99, 1.0])
def test_a_plan_no_faster_is_rarely_kept_early(truth):
    """A plan as fast as stock DDP or 1% slower, pairs 3% apart: the clear-gain rule (a keep before
    min_pairs_keep) must stay rare, at most 2% of trials (with the 95% t interval it was 3.7%)."""
    early = sum(v == "plan" and n < RULE.min_pairs_keep for v, n in _trials(truth, 0.03))
    assert early / 300 <= 0.02


def test_a_clear_gain_is_kept_after_three_pairs():
    got = _trials(1.15, 0.02, 50)
    assert all(v == "plan" for v, _ in got) and statistics.median(n for _, n in got) == RULE.min_pairs_clear
