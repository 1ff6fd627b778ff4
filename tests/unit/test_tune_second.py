"""Tuning's race: once the first plan has its verdict and the cost is inside its budget, the
bucket_cap_mb values predicted fastest are tried the same way one after another, each against the
plan measured best so far, or against stock DDP's defaults while none has measured faster; the
choice of those caps (planners.compare.ranked_caps)."""

from __future__ import annotations

import math

import pytest

from commsched.calibrate.trial import TrialRule
from commsched.cost.models import AlphaBeta
from commsched.planners.base import make_plan
from commsched.planners.compare import plan_label, ranked_caps, same_buckets
from commsched.planners.stock_ddp import DDP, ddp_with_cap
from commsched.planners import WFBP
from commsched.runtime import tune as tune_mod
from commsched.runtime.tune import Tuner, TuneConfig
from commsched.sim.semantics import Semantics
from commsched.types import ModelProfile, TensorSpec

MIB = 1 << 20
GLOO = Semantics("gloo", 1)


def _profile(n: int = 12, mib: float = 2.0, backward_s: float = 0.01) -> ModelProfile:
    return ModelProfile("m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", int(mib * MIB), backward_s) for i in range(n)))


# --- the choice of the second plan -----------------------------------------------------------------


def _best_cap(*args):
    """The first of ranked_caps, or (None, nan)."""
    ranked = ranked_caps(*args)
    return ranked[0] if ranked else (None, math.nan)


def test_the_first_ranked_cap_is_the_fastest_predicted_cap_that_differs_from_the_others_and_beats_stock():
    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)  # 250 MB/s: the link is the bottleneck, small buckets overlap more
    stock = make_plan(DDP(), prof, cost, GLOO)
    stock_s = stock.predicted.iteration_s
    plan, t = _best_cap(prof, cost, GLOO, (1, 5, 10, 25, 50, 100), [stock], stock_s)
    assert plan is not None and t < stock_s
    timings = {}
    for mb in (1, 5, 10, 25, 50, 100):
        p = make_plan(ddp_with_cap(mb), prof, cost, GLOO)
        if not same_buckets(p, stock):
            timings[mb] = p.predicted.iteration_s
    assert t == pytest.approx(min(timings.values()))
    assert plan_label(plan) == f"bucket_cap_mb={min(timings, key=timings.get):g}"
    # excluding that plan gives the next one; a threshold nothing beats gives none
    nxt, t2 = _best_cap(prof, cost, GLOO, (1, 5, 10, 25, 50, 100), [stock, plan], stock_s)
    assert nxt is None or (t2 >= t and not same_buckets(nxt, plan))
    none, nan = _best_cap(prof, cost, GLOO, (1, 5, 10), [stock], 0.0)
    assert none is None and math.isnan(nan)


def test_ranked_caps_are_the_caps_fastest_first_each_with_buckets_of_its_own():
    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)
    stock = make_plan(DDP(), prof, cost, GLOO)
    caps = (100, 50, 25, 10, 5, 1, 0.5, 3, 3.5)  # 3 and 3.5 MiB make the same buckets of 2 MiB tensors
    ranked = ranked_caps(prof, cost, GLOO, caps, [stock], math.inf)
    times = [t for _, t in ranked]
    assert times == sorted(times) and len(ranked) >= 3
    for i, (p, t) in enumerate(ranked):
        mb = float(plan_label(p).removeprefix("bucket_cap_mb="))
        assert not same_buckets(p, stock) and t == pytest.approx(make_plan(ddp_with_cap(mb), prof, cost, GLOO).predicted.iteration_s)
        assert not any(same_buckets(p, q) for q, _ in ranked[i + 1:])
    labels = [plan_label(p) for p, _ in ranked]
    assert "bucket_cap_mb=3.5" not in labels  # 3 MiB, listed first, has its buckets
    # every cap listed is ranked unless it is stock's buckets or another's
    assert len(ranked) == len({tuple(b.bytes for b in make_plan(ddp_with_cap(mb), prof, cost).buckets) for mb in caps} - {tuple(b.bytes for b in stock.buckets)})
    assert ranked_caps(prof, cost, GLOO, caps, [stock], times[0]) == []  # faster than the fastest: none


def test_plan_label_names_caps_and_strategies():
    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)
    assert plan_label(make_plan(ddp_with_cap(2.5), prof, cost)) == "bucket_cap_mb=2.5"
    assert plan_label(make_plan(DDP(), prof, cost)) == "ddp"  # stock's defaults: two caps
    assert plan_label(make_plan(WFBP(), prof, cost)) == "wfbp"


@pytest.mark.parametrize("bad", [(0,), (-1.0,), (math.inf,), ("1",), 5, (True,)])
def test_fallback_caps_are_checked(bad):
    from commsched.errors import CommschedError

    with pytest.raises(CommschedError, match="fallback_caps_mb"):
        TuneConfig(fallback_caps_mb=bad)


# --- the trial's state machine -----------------------------------------------------------------------


class _Clock:
    def __init__(self, periods: list[float]) -> None:
        self.periods = periods
        self.stamps = [0.0] * (len(periods) + 1)

    def period(self, k: int) -> float:
        return self.periods[k]


def _tuner(monkeypatch, cfg: TuneConfig, first, second, stock, fresh: bool = True, beats_stock: bool = True) -> Tuner:
    """A Tuner on rank 0 at the start of its trial (calibration done at step ``start``), no process
    group; its DDPs are ("ddp", label) tuples. ``second``: the cap that races, or a list of them in
    the model's order. ``fresh``: each switch builds the DDP afresh (as under
    find_unused_parameters), else one plan DDP is kept across switches. ``beats_stock``: whether
    the model predicts the caps faster than stock DDP's defaults (one for all, or one each)."""
    monkeypatch.setattr(tune_mod, "broadcast_bytes", lambda payload, *a, **k: payload)
    t = object.__new__(Tuner)
    t.cfg, t.rank, t.group, t.device, t.world, t.backend = cfg, 0, None, None, 2, "gloo"
    t.fresh_per_switch = fresh
    t._new_ddp = lambda plan: ("ddp", plan_label(plan) if plan is not None else "stock")
    t.phase, t.decision, t.reason, t.entry, t.recorder, t.comparison, t.key, t.decided_at = "trial", None, "", None, None, None, "k", None
    t.plan, t.stock_plan = first, stock
    caps = second if isinstance(second, list) else [second]
    beats = beats_stock if isinstance(beats_stock, list) else [beats_stock] * len(caps)
    t.challengers = list(zip(caps, beats))
    t.incumbent = t.incumbent_ddp = None
    t.trial_plan, t.trial_against, t.last_speedup = first, "stock", None
    t.plan_ddp = None if fresh else t._new_ddp(first)
    t.trials, t.tried_plans, t.summary, t.ratios = [], [], {}, []
    t.pairs = t.pairs_before = 0
    t.last_why = ""
    t.own_s, t.recorder_own_s, t._route_t0 = 0.0, 0.0, None
    t._grad_hooks = []
    start = cfg.warmup_steps + cfg.calibration_steps
    t.variant_of = ["stock"] * start
    t.own_by_step = [0.0] * start
    t.step = start
    t.trial_start = start + cfg.rule.block
    t.active, t.active_variant = None, "stock"
    t.clock = _Clock([1.0] * start)
    return t


def _run(t: Tuner, speed: dict[str, float], steps: int) -> list[str]:
    """Run ``steps`` steps: a step takes speed[label of the plan it runs] (1.0 on stock DDP)."""
    ran = []
    for _ in range(steps):
        if t.phase == "done":
            break
        v = t._advance()
        t._switch(v)
        t.variant_of.append(v)
        t.own_by_step.append(0.0)
        on = {"plan": t.plan, "incumbent": t.incumbent}.get(v)
        t.clock.periods.append(speed[plan_label(on)] if on is not None else 1.0)
        t.clock.stamps.append(0.0)
        ran.append(f"{v}:{plan_label(on)}" if on is not None else v)
        t.step += 1
    return ran


def _plans():
    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)
    return make_plan(WFBP(), prof, cost), make_plan(ddp_with_cap(5), prof, cost), make_plan(DDP(), prof, cost)


# steps here take exact times, so every pair's ratio is the same and any gain is "clear": the
# clear-gain rule is off (min_pairs_clear = min_pairs_keep) to count the pairs of the bootstrap rule;
# test_a_clear_gain_is_kept_after_three_pairs has it on
RULE = TrialRule(block=2, min_pairs_reject=3, min_pairs_keep=6, min_pairs_clear=6, max_pairs=16)
ROOMY = TuneConfig(warmup_steps=3, calibration_steps=8, rule=RULE, max_cost=0.5, log=False)  # a budget no test here reaches


@pytest.mark.parametrize("fresh", [True, False])
def test_a_first_plan_that_loses_inside_the_budget_hands_over_to_the_second(monkeypatch, fresh):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, fresh)
    ran = _run(t, {"wfbp": 1.05, "bucket_cap_mb=5": 0.9}, 200)
    assert t.decision == "plan" and t.plan is second and not t.challengers
    assert t.active == ("ddp", "bucket_cap_mb=5")  # the second plan's DDP runs on, the first's is gone
    assert fresh or t.plan_ddp is t.active
    # the first plan: its untimed block and 3 pairs (12 steps), then the second's untimed block and 6 pairs
    assert ran[:2] == ["plan:wfbp"] * 2 and ran.count("plan:wfbp") == 2 + 3 * 2
    assert ran.count("plan:bucket_cap_mb=5") == 2 + 6 * 2 + 1  # its untimed block, 6 pairs to keep it, and the deciding step
    doc = t.report()
    assert doc["trial_pairs"] == 9 and doc["decision"] == "plan"
    assert [tr["plan"] for tr in doc["trials"]] == ["wfbp", "bucket_cap_mb=5"]
    assert doc["trials"][0]["measured_speedup"]["ci95"][1] < 1 < doc["trials"][1]["measured_speedup"]["ci95"][0]
    assert "wfbp" not in doc["trials"][1]["why"]  # each trial's own verdict; the reason tells both
    assert doc["reason"].startswith("wfbp: measured") and "; then bucket_cap_mb=5: measured" in doc["reason"]
    assert len(doc["trials"][0]["plan_steps_s"]) == 6 and len(doc["trial"]["plan_steps_s"]) == 12
    # the report shows both plans against stock DDP's steps of both trials
    v = tune_mod._trial_as_validate(doc, [first, second], stock, RULE, 2, "gloo")
    assert set(v["strategies"]) == {"wfbp", "bucket_cap_mb=5"} and v["best_measured"] == "bucket_cap_mb=5"


def test_a_clear_gain_is_kept_after_three_pairs(monkeypatch):
    """The default rule: pairs that all measure the plan 10% faster, and then the cap 10% faster
    again, end each trial after min_pairs_clear (3) pairs: 6 steps of stock DDP's defaults, not 12."""
    first, second, stock = _plans()
    rule = TrialRule()
    t = _tuner(monkeypatch, TuneConfig(warmup_steps=3, calibration_steps=8, rule=rule, max_cost=0.5, log=False), first, second, stock)
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.81}, 200)
    assert rule.min_pairs_clear == 3 and t.decision == "plan" and t.plan is second
    start = t.cfg.warmup_steps + t.cfg.calibration_steps
    assert ran.count("stock") == 3 * 2  # the first trial's baseline: 3 pairs of 2 steps
    assert ran.count("incumbent:wfbp") == 3 * 2
    doc = t.report()
    assert [tr["pairs"] for tr in doc["trials"]] == [3, 3] and doc["trial_pairs"] == 6
    assert "a clear gain" in doc["trials"][0]["why"] and doc["trials"][0]["measured_speedup"]["t_lower"] > 1
    assert doc["steps_to_decide"] == start + 2 * (2 + 3 * 4)


def test_a_report_read_while_tuning_runs_keeps_nothing_yet(monkeypatch):
    """``model.tuning`` read mid-trial said kept "stock" before anything was decided."""
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock)
    _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.81}, 5)
    doc = t.report()
    assert doc["decision"] is None and doc["kept"] is None and doc["phase"] == "trial"
    _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.81}, 200)
    doc = t.report()
    assert doc["phase"] == "done" and doc["kept"] == "bucket_cap_mb=5"


@pytest.mark.parametrize("fresh", [True, False])
def test_a_cap_as_fast_as_the_winner_is_dropped_after_three_pairs(monkeypatch, fresh):
    """Before, a tie raced to max_pairs (16 pairs, 64 steps); the winner so far stays either way."""
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, fresh)
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.9}, 200)
    assert t.decision == "plan" and t.plan is first and t.incumbent is None
    assert t.active == ("ddp", "wfbp")
    doc = t.report()
    race = doc["trials"][-1]  # the last trial, the cap's race
    assert ran.count("plan:bucket_cap_mb=5") == 2 + 3 * 2  # its untimed block and 3 pairs
    assert "no gain over it, so it stays" in doc["reason"] and "in 3 pairs" in doc["reason"].split("then ")[-1]
    assert race["plan"] == "bucket_cap_mb=5" and race["against"] == "wfbp"


def test_a_second_plan_predicted_no_faster_than_stock_ddp_follows_no_first_plan_that_lost(monkeypatch):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, beats_stock=False)
    ran = _run(t, {"wfbp": 1.05, "bucket_cap_mb=5": 0.9}, 200)
    assert t.decision == "stock" and not any("bucket_cap_mb" in r for r in ran)


def test_a_second_plan_predicted_no_faster_than_stock_ddp_still_races_a_first_plan_that_won(monkeypatch):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, beats_stock=False)
    _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.8}, 200)
    assert t.decision == "plan" and t.plan is second
    assert [tr["against"] for tr in t.report()["trials"]] == ["stock", "wfbp"]


def test_a_second_plan_that_loses_too_leaves_stock_ddp(monkeypatch):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock)
    _run(t, {"wfbp": 1.05, "bucket_cap_mb=5": 1.04}, 200)
    assert t.decision == "stock" and t.active == ("ddp", "stock")  # stock DDP built afresh (fresh_per_switch)
    assert [tr["plan"] for tr in t.report()["trials"]] == ["wfbp", "bucket_cap_mb=5"]


def test_no_second_plan_once_the_budget_is_spent(monkeypatch):
    first, second, stock = _plans()
    # 0.5% of 200 one-second steps is 1 s: the first plan's 8 steps at +0.25 s cost 2 s
    t = _tuner(monkeypatch, TuneConfig(warmup_steps=3, calibration_steps=8, rule=RULE, max_cost=0.005, log=False), first, second, stock)
    ran = _run(t, {"wfbp": 1.25, "bucket_cap_mb=5": 0.9}, 200)
    assert t.decision == "stock" and "more than its budget" in t.reason
    assert not any("bucket_cap_mb" in r for r in ran) and "trials" not in t.report()


@pytest.mark.parametrize("fresh", [True, False])
def test_a_first_plan_that_wins_is_raced_by_the_second_which_replaces_it_only_when_measured_faster(monkeypatch, fresh):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, fresh)
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.8}, 200)
    assert t.decision == "plan" and t.plan is second and t.incumbent is None
    assert t.active == ("ddp", "bucket_cap_mb=5")
    # the first plan: its untimed block and 6 pairs against stock; then the second's untimed block
    # and 6 pairs against the first, never against stock DDP
    after = ran[ran.index("plan:bucket_cap_mb=5"):]
    assert ran.count("plan:wfbp") == 2 + 6 * 2 and "stock" not in after
    assert after.count("incumbent:wfbp") == 6 * 2
    doc = t.report()
    assert doc["kept"] == "bucket_cap_mb=5" and doc["steps_by_variant"]["plan"] == len(ran) - ran.count("stock")  # the first plan as incumbent counts
    assert [(tr["plan"], tr["against"]) for tr in doc["trials"]] == [("wfbp", "stock"), ("bucket_cap_mb=5", "wfbp")]
    assert doc["trial"]["against"] == "wfbp" and doc["trial"]["stock_steps_s"] == [0.9] * 12  # the last trial's baseline: wfbp's steps
    assert doc["measured_speedup"]["against"] == "wfbp" and doc["measured_speedup"]["median"] == pytest.approx(0.9 / 0.8)
    assert doc["reason"].startswith("wfbp: measured 1.111x") and "; then bucket_cap_mb=5: measured 1.125x" in doc["reason"]
    assert doc["reason"].endswith("over wfbp's buckets in 6 pairs of 2 steps")
    # the report chains the second plan's speedup over stock DDP through the first's
    v = tune_mod._trial_as_validate(doc, [first, second], stock, RULE, 2, "gloo")
    assert v["best_measured"] == "bucket_cap_mb=5"
    assert v["strategies"]["bucket_cap_mb=5"]["speedup_vs_stock_ddp"] == pytest.approx(1 / 0.8)
    assert v["strategies"]["wfbp"]["measured_s"] == pytest.approx(0.9) and v["stock_ddp"]["measured_s"] == 1.0


@pytest.mark.parametrize("fresh", [True, False])
def test_a_first_plan_that_wins_stays_when_the_second_is_no_faster_than_it(monkeypatch, fresh):
    first, second, stock = _plans()
    t = _tuner(monkeypatch, ROOMY, first, second, stock, fresh)
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.95}, 200)
    assert t.decision == "plan" and t.plan is first and t.incumbent is None
    assert t.active == ("ddp", "wfbp")  # the first plan's DDP runs on (built afresh or the one kept)
    assert fresh or t.plan_ddp is t.active
    assert ran.count("plan:bucket_cap_mb=5") == 2 + 3 * 2  # its untimed block and 3 pairs to reject it
    doc = t.report()
    assert doc["kept"] == "wfbp" and doc["measured_speedup"]["against"] == "stock"
    assert doc["measured_speedup"]["median"] == pytest.approx(1 / 0.9)  # the kept plan's own, over stock DDP
    assert doc["reason"].startswith("wfbp: measured 1.111x") and "; then bucket_cap_mb=5: measured 0.947x" in doc["reason"]
    assert doc["trials"][1]["measured_speedup"]["median"] == pytest.approx(0.9 / 0.95)
    v = tune_mod._trial_as_validate(doc, [first, second], stock, RULE, 2, "gloo")
    assert v["best_measured"] == "wfbp" and len(v["strategies"]["wfbp"]) and v["stock_ddp"]["measured_s"] == 1.0


def test_a_second_plan_slower_than_stock_ddp_ends_on_the_budget_and_the_first_stays(monkeypatch):
    first, second, stock = _plans()
    # 1% of 200 one-second steps is 2 s; the first plan banks 0.05 s a step (14 steps: 0.7 s); the
    # second, 0.8 s slower a step, spends that and the budget in its first blocks
    t = _tuner(monkeypatch, TuneConfig(warmup_steps=3, calibration_steps=8, rule=RULE, max_cost=0.01, log=False), first, second, stock)
    ran = _run(t, {"wfbp": 0.95, "bucket_cap_mb=5": 1.8}, 200)
    assert t.decision == "plan" and t.plan is first
    assert "more than its budget" in t.reason and "before bucket_cap_mb=5 measured faster than wfbp's buckets" in t.reason
    assert ran.count("plan:bucket_cap_mb=5") <= 2 + 2 + 1


def test_the_budget_also_ends_the_second_trial(monkeypatch):
    first, second, stock = _plans()
    # 1% of 200 one-second steps is 2 s: the first plan's 8 steps at +0.1 s cost 0.8 s and it is
    # dropped after 3 pairs; the second, at +0.4 s a step, spends the rest in its first 3 blocks
    t = _tuner(monkeypatch, TuneConfig(warmup_steps=3, calibration_steps=8, rule=RULE, max_cost=0.01, log=False), first, second, stock)
    ran = _run(t, {"wfbp": 1.1, "bucket_cap_mb=5": 1.4}, 200)
    assert t.decision == "stock" and "more than its budget" in t.reason
    assert ran.count("plan:bucket_cap_mb=5") == 2 + 2  # its untimed block and one timed block: the first check ends it
    assert t.cost_s() > t.budget_s()


# --- a race of several caps ----------------------------------------------------------------------------


def _three():
    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)
    first, a, stock = _plans()
    return first, a, make_plan(ddp_with_cap(1), prof, cost), stock


@pytest.mark.parametrize("fresh", [True, False])
def test_each_cap_races_the_winner_so_far_and_the_last_winner_is_kept(monkeypatch, fresh):
    first, a, b, stock = _three()
    t = _tuner(monkeypatch, ROOMY, first, [a, b], stock, fresh)
    # wfbp beats stock, cap 5 beats wfbp and replaces it, cap 1 loses to cap 5: cap 5 stays
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.8, "bucket_cap_mb=1": 0.85}, 300)
    assert t.decision == "plan" and t.plan is a and t.incumbent is None and not t.challengers
    assert t.active == ("ddp", "bucket_cap_mb=5") and (fresh or t.plan_ddp is t.active)
    after_b = ran[ran.index("plan:bucket_cap_mb=1"):]
    assert "stock" not in after_b and "incumbent:wfbp" not in after_b and after_b.count("incumbent:bucket_cap_mb=5") == 3 * 2
    doc = t.report()
    assert [(tr["plan"], tr["against"]) for tr in doc["trials"]] == [("wfbp", "stock"), ("bucket_cap_mb=5", "wfbp"), ("bucket_cap_mb=1", "bucket_cap_mb=5")]
    assert doc["kept"] == "bucket_cap_mb=5"
    # the kept plan's own measurement, against the plan it replaced
    assert doc["measured_speedup"]["against"] == "wfbp" and doc["measured_speedup"]["median"] == pytest.approx(0.9 / 0.8)
    assert doc["reason"].count("; then ") == 2 and "then bucket_cap_mb=1: measured 0.941x" in doc["reason"]
    # the report chains each cap's speedup over stock DDP through the plans it raced
    v = tune_mod._trial_as_validate(doc, [first, a, b], stock, RULE, 2, "gloo")
    assert v["best_measured"] == "bucket_cap_mb=5"
    assert v["strategies"]["bucket_cap_mb=1"]["speedup_vs_stock_ddp"] == pytest.approx(1 / 0.85)
    assert v["strategies"]["bucket_cap_mb=5"]["measured_s"] == pytest.approx(0.8)


@pytest.mark.parametrize("fresh", [True, False])
def test_a_second_cap_replaces_the_first_plan_after_the_first_cap_lost_to_it(monkeypatch, fresh):
    first, a, b, stock = _three()
    t = _tuner(monkeypatch, ROOMY, first, [a, b], stock, fresh, beats_stock=False)
    ran = _run(t, {"wfbp": 0.9, "bucket_cap_mb=5": 0.95, "bucket_cap_mb=1": 0.8}, 300)
    assert t.decision == "plan" and t.plan is b and t.active == ("ddp", "bucket_cap_mb=1")
    assert [(tr["plan"], tr["against"]) for tr in t.report()["trials"]] == [("wfbp", "stock"), ("bucket_cap_mb=5", "wfbp"), ("bucket_cap_mb=1", "wfbp")]
    assert ran.count("incumbent:wfbp") == 3 * 2 + 6 * 2  # raced by cap 5 (3 pairs to reject it), then by cap 1 (6 to keep it)


def test_after_a_losing_first_plan_a_cap_that_wins_against_stock_is_raced_by_the_next(monkeypatch):
    first, a, b, stock = _three()
    # the next cap races the winner whatever its prediction (b is predicted no faster than stock)
    t = _tuner(monkeypatch, ROOMY, first, [a, b], stock, beats_stock=[True, False])
    _run(t, {"wfbp": 1.05, "bucket_cap_mb=5": 0.9, "bucket_cap_mb=1": 0.8}, 300)
    assert t.decision == "plan" and t.plan is b
    assert [(tr["plan"], tr["against"]) for tr in t.report()["trials"]] == [("wfbp", "stock"), ("bucket_cap_mb=5", "stock"), ("bucket_cap_mb=1", "bucket_cap_mb=5")]


@pytest.mark.parametrize("beats", [True, False])
def test_while_nothing_has_won_the_next_cap_races_stock_only_if_predicted_faster(monkeypatch, beats):
    first, a, b, stock = _three()
    t = _tuner(monkeypatch, ROOMY, first, [a, b], stock, beats_stock=[True, beats])
    ran = _run(t, {"wfbp": 1.05, "bucket_cap_mb=5": 1.05, "bucket_cap_mb=1": 0.9}, 300)
    assert ("plan:bucket_cap_mb=1" in ran) == beats
    assert t.decision == ("plan" if beats else "stock") and t.incumbent is None
    if beats:
        assert [tr["against"] for tr in t.report()["trials"]] == ["stock"] * 3


def test_race_caps_is_a_count():
    from commsched.errors import CommschedError

    assert TuneConfig().race_caps == 2 and TuneConfig(race_caps=0).race_caps == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(CommschedError, match="race_caps"):
            TuneConfig(race_caps=bad)


@pytest.mark.parametrize("race_caps", [0, 1, 2, 3])
def test_the_plan_doc_names_the_race_caps_first_caps_the_model_ranks(monkeypatch, race_caps):
    """Rank 0's plan document: the first ``race_caps`` of ranked_caps, in its order, each with
    whether it is predicted faster than stock DDP, under the in-job model (fit_in_job stubbed)."""
    from commsched.calibrate.in_job import InJobModel
    from commsched.formats.io import plan_from_json

    prof = _profile()
    cost = AlphaBeta(0.001, 1 / 250e6)
    model = InJobModel(prof, cost, "alpha-beta", (), 0.0, ())
    monkeypatch.setattr(tune_mod, "fit_in_job", lambda *a, **k: model)
    t = object.__new__(Tuner)
    t.cfg = TuneConfig(strategy="wfbp", min_gain=0.0, race_caps=race_caps, log=False)
    t.find_unused, t.backend, t.world, t.module, t.sizes = False, "gloo", 2, object(), {}
    t.ddp_kwargs = {}
    t.cost_s = lambda: 0.0
    t.budget_s = lambda: 1.0
    doc = t._plan_doc([], [], [])
    assert doc["try"]
    first, stock = plan_from_json(doc["plan"]), plan_from_json(doc["stock"])
    want = ranked_caps(prof, cost, GLOO, TuneConfig().fallback_caps_mb, [first, stock], math.inf)[:race_caps]
    assert [plan_label(plan_from_json(c)) for c in doc["challengers"]] == [plan_label(p) for p, _ in want]
    assert [c["beats_stock"] for c in doc["predicted"].get("challengers", [])] == [s < doc["predicted"]["stock_s"] for _, s in want]
    assert race_caps < 2 or len(want) == race_caps  # the profile leaves caps enough to race
