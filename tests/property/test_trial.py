"""The trial's verdict (commsched.calibrate.trial): a plan is kept only with its interval above 1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commsched.calibrate.trial import TrialRule, pair_ratios, speedup_interval, verdict
from commsched.errors import CommschedError

RULE = TrialRule(resamples=300)
ratios = st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=0, max_size=RULE.max_pairs)


@settings(max_examples=150, deadline=None)
@given(ratios)
def test_a_plan_is_kept_only_with_its_interval_above_one(rs):
    v = verdict(rs, RULE)
    if v == "plan":
        _, lo, _ = speedup_interval(rs, RULE.resamples, RULE.seed)
        assert lo > 1.0 and len(rs) >= RULE.min_pairs_keep
    if v == "stock" and len(rs) < RULE.max_pairs:
        _, _, hi = speedup_interval(rs, RULE.resamples, RULE.seed)
        assert hi < 1.0 and len(rs) >= RULE.min_pairs_reject


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=RULE.max_pairs, max_size=RULE.max_pairs))
def test_the_trial_always_ends_by_max_pairs(rs):
    assert verdict(rs, RULE) in ("plan", "stock")


@given(st.lists(st.floats(0.5, 1.5, allow_nan=False), min_size=0, max_size=RULE.min_pairs_reject - 1))
def test_no_verdict_before_the_fewest_pairs(rs):
    assert verdict(rs, RULE) is None


def test_clear_gains_and_losses_stop_early():
    assert verdict([1.2, 1.15, 1.18, 1.21, 1.17, 1.19], RULE) == "plan"
    assert verdict([1.2] * 5, RULE) is None  # a gain needs min_pairs_keep pairs
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


@pytest.mark.parametrize("kwargs", [{"block": 0}, {"max_pairs": 2, "min_pairs_keep": 3}, {"resamples": True}, {"min_pairs_reject": 1.5}])
def test_bad_rules_name_the_value(kwargs):
    with pytest.raises(CommschedError, match="TrialRule"):
        TrialRule(**kwargs)
