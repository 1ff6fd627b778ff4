"""What tuning says it cost (Tuner.cost_s): the steps off stock DDP's defaults (a plan tried, or the
first plan it races) over stock DDP's median step, and the tuner's own work inside stock steps;
stock steps themselves are free."""

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


def test_the_first_plans_steps_in_a_race_count_as_plan_steps():
    # the first plan won (0.9 s a step) and races a second (1.2 s): both are off stock DDP, so the
    # first's gains offset the second's losses, as the job sees them
    cfg = TuneConfig(warmup_steps=2)
    periods = [9.0, 9.0, 1.0, 1.0, 0.9, 0.9, 1.2, 1.2, 0.9]
    variants = ["stock"] * 4 + ["plan", "plan", "plan", "plan", "incumbent", "incumbent"]
    t = _tuner(periods, variants, [0.0] * 10, cfg)
    assert t.cost_s() == pytest.approx(0.01 - 0.1 - 0.1 + 0.2 + 0.2 - 0.1)


def test_a_plan_step_whose_period_is_not_closed_counts_its_own_work():
    cfg = TuneConfig(warmup_steps=2)
    t = _tuner([1.0, 1.0, 1.0, 1.0], ["stock", "stock", "stock", "stock", "plan"], [0.0, 0.0, 0.0, 0.0, 0.3], cfg)
    assert t.cost_s() == pytest.approx(0.01 + 0.3)


def test_max_cost_is_a_fraction():
    from commsched.errors import CommschedError

    with pytest.raises(CommschedError, match="max_cost must be a fraction"):
        TuneConfig(max_cost=1.5)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cache_dir": 123}, "cache_dir must be a path or None, got int 123"),
    ({"out_dir": ["a"]}, "out_dir must be a path or None, got list"),
    ({"cluster": 4}, "cluster must be a name"),
    ({"log": "no"}, "log must be True or False, got 'no'"),
    ({"retune": 1}, "retune must be True or False, got 1"),
])
def test_a_config_of_the_wrong_type_is_refused_where_it_is_made(kwargs, message):
    """Not later, inside DataParallel on every rank (a cache_dir of 123 was a TypeError there; log="no" logged)."""
    from pathlib import Path

    from commsched.errors import CommschedError

    with pytest.raises(CommschedError, match=message):
        TuneConfig(**kwargs)
    assert TuneConfig(cache_dir=Path("/tmp/x")).memory_dir() == Path("/tmp/x")


def test_the_probes_estimate_from_the_largest_size_probed_and_the_fastest_recorded_rate():
    from commsched.calibrate.in_job import Busy
    from commsched.errors import CommschedError
    from commsched.runtime.tune import probe_estimate_s

    kib = 1024
    recorded = [Busy(1, 4 << 20, 0.040, 0.02), Busy(1, 1 << 20, 0.008), Busy(2, 4 << 20, 0.050)]  # fastest: 1 MiB in 8 ms
    rate = (1 << 20) / 0.008
    # 16 KiB probed at 2 ms and 3 ms a call (medians per size); 128 KiB adds 112 KiB at the rate
    probed = [Busy(8, 8 * 16 * kib, 0.016), Busy(8, 8 * 16 * kib, 0.024)]
    assert probe_estimate_s(128 * kib, 17, probed, recorded) == pytest.approx(17 * (0.0025 + 112 * kib / rate))
    # a size no larger than the one probed costs its per-call time; the largest size probed is the reference
    assert probe_estimate_s(16 * kib, 9, probed, recorded) == pytest.approx(9 * 0.0025)
    probed.append(Busy(8, 8 * 128 * kib, 0.032))
    assert probe_estimate_s(1 << 20, 17, probed, recorded) == pytest.approx(17 * (0.004 + 896 * kib / rate))
    assert probe_estimate_s(1 << 20, 17, probed, []) == pytest.approx(17 * 0.004)  # no rate known: no extra
    with pytest.raises(CommschedError, match="needs a size probed"):
        probe_estimate_s(1 << 20, 17, [], recorded)


class _Work:
    def wait(self, timeout=None):
        return True


def _prober(monkeypatch, total_bytes: int, budget_s: float, estimate_s: float):
    """A rank-0 Tuner whose all-reduces are counted, not run: each data call costs 1 ms of tuning."""
    import torch

    from commsched.runtime import tune as tune_mod
    from commsched.runtime.tune import Tuner

    calls = {"data": [], "flags": 0}

    def all_reduce(x, group=None, async_op=False):
        if x.dtype == torch.int32:
            calls["flags"] += 1
        else:
            calls["data"].append(x.numel() * 4)
        return _Work()

    monkeypatch.setattr(tune_mod.dist, "all_reduce", all_reduce)
    monkeypatch.setattr(tune_mod, "probe_estimate_s", lambda size, n, probed, recorded: estimate_s)
    t = object.__new__(Tuner)
    t.sizes, t.rank, t.device, t.cuda, t.group, t.summary = {"w": total_bytes}, 0, torch.device("cpu"), False, None, {}
    t.cost_s = lambda: 0.001 * len(calls["data"])
    t.budget_s = lambda: budget_s
    return t, calls


def test_the_probes_stop_where_the_next_size_would_pass_the_budget(monkeypatch):
    from commsched.runtime.tune import PROBE_REPEATS

    kib = 1024
    # 16 KiB always runs (17 calls, 0.017 s); 128 KiB: 0.017 + 0.05 <= 0.07, runs; 1 MiB: 0.034 + 0.05 > 0.07
    t, calls = _prober(monkeypatch, 64 << 20, budget_s=0.07, estimate_s=0.05)
    points = t._probe(10.0, [])
    assert sorted(set(calls["data"])) == [16 * kib, 128 * kib] and calls["flags"] == 2
    assert len(points) == 2 * PROBE_REPEATS and t.summary["probes_skipped_bytes"] == [1 << 20]
    # a budget spent already: the smallest size still runs, the others are called off
    t, calls = _prober(monkeypatch, 64 << 20, budget_s=0.0, estimate_s=0.0)
    t._probe(10.0, [])
    assert set(calls["data"]) == {16 * kib} and t.summary["probes_skipped_bytes"] == [128 * kib, 1 << 20]
    # a budget that holds them all: every size, and nothing said skipped
    t, calls = _prober(monkeypatch, 64 << 20, budget_s=1.0, estimate_s=0.05)
    t._probe(10.0, [])
    assert sorted(set(calls["data"])) == [16 * kib, 128 * kib, 1 << 20] and "probes_skipped_bytes" not in t.summary


def test_no_probe_is_larger_than_every_gradient_together(monkeypatch):
    t, calls = _prober(monkeypatch, 200 * 1024, budget_s=1.0, estimate_s=0.0)
    t._probe(10.0, [])
    assert max(calls["data"]) == 128 * 1024
    t, calls = _prober(monkeypatch, 1000, budget_s=1.0, estimate_s=0.0)  # a tiny model still gets the smallest size
    t._probe(10.0, [])
    assert set(calls["data"]) == {16 * 1024}
