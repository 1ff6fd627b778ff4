"""What tuning says it cost (Tuner.cost_s): the plan's steps over stock DDP's median step, and the
tuner's own work inside stock steps; stock steps themselves are free."""

from __future__ import annotations

import pytest

from commsched.runtime.tune import Tuner, TuneConfig, _Clock


def _tuner(periods: list[float], variants: list[str], own: list[float], cfg: TuneConfig) -> Tuner:
    t = object.__new__(Tuner)
    t.cfg = cfg
    t.clock = _Clock(cuda=False)
    t.clock.stamps = [sum(periods[:k]) for k in range(len(periods) + 1)]
    t.variant_of = variants
    t.own_by_step = own
    t.own_s = sum(own)
    t.recorder_own_s = 0.01
    t._route_t0 = None
    return t


def test_the_cost_is_the_plans_excess_and_the_tuners_work_in_stock_steps():
    cfg = TuneConfig(warmup_steps=2, min_job_steps=200, max_cost=0.005)
    # warm-up (not counted), calibration (stock, 1.0 s), the plan's first step carries the probes
    # (1.5 s), then stock 1.0 s with 0.02 s of the tuner's own, plan 1.1 s, and the deciding step
    periods = [9.0, 9.0, 1.0, 1.0, 1.0, 1.5, 1.0, 1.1, 1.0]
    variants = ["stock"] * 5 + ["plan", "stock", "plan", "stock", "stock"]
    own = [0.0, 0.0, 0.0, 0.0, 0.0, 0.4, 0.02, 0.0, 0.0, 0.03]
    t = _tuner(periods, variants, own, cfg)
    assert t._reference_s() == 1.0  # the warm-up's slow steps are not the reference
    assert t.cost_s() == pytest.approx(0.01 + 0.5 + 0.02 + 0.1 + 0.0 + 0.03)
    assert t.budget_s() == pytest.approx(0.005 * 200 * 1.0)


def test_a_plan_step_whose_period_is_not_closed_counts_its_own_work():
    cfg = TuneConfig(warmup_steps=2)
    t = _tuner([1.0, 1.0, 1.0, 1.0], ["stock", "stock", "stock", "stock", "plan"], [0.0, 0.0, 0.0, 0.0, 0.3], cfg)
    assert t.cost_s() == pytest.approx(0.01 + 0.3)


def test_max_cost_is_a_fraction():
    from commsched.errors import CommschedError

    with pytest.raises(CommschedError, match="max_cost must be a fraction"):
        TuneConfig(max_cost=1.5)
