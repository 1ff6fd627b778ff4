"""`optimal` is the exact minimum over all contiguous bucketings, and no strategy beats it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.planners import STRATEGIES, make_plan
from commsched.planners.optimal import Optimal, _exhaustive, _linear, _pruned, optimal_ends
from commsched.sim.timeline import iteration_end_s, prefix_bytes
from commsched.cost.models import AlphaBeta
from tests.conftest import alpha_beta_costs, costs, profiles, table_costs


def brute_force(profile, cost) -> float:
    """Minimum iteration end over all 2^(L-1) bucketings."""
    n = len(profile.tensors)
    ready, pb = profile.ready_s, prefix_bytes(profile)
    best = float("inf")
    for r in range(n):
        for cuts in itertools.combinations(range(1, n), r):
            best = min(best, iteration_end_s(ready, pb, (*cuts, n), cost))
    return best


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 + 1e-9 * abs(b)


@given(profiles(max_tensors=12), costs)
def test_optimal_equals_brute_force(profile, cost):
    ends = Optimal().ends(profile, cost)
    got = iteration_end_s(profile.ready_s, prefix_bytes(profile), ends, cost)
    assert close(got, brute_force(profile, cost))


@given(profiles(max_tensors=10), table_costs(monotone=False))
def test_optimal_is_exact_for_costs_that_fall_with_size(profile, cost):
    ends = Optimal().ends(profile, cost)
    got = iteration_end_s(profile.ready_s, prefix_bytes(profile), ends, cost)
    assert close(got, brute_force(profile, cost))


@given(profiles(max_tensors=12), costs)
def test_no_strategy_beats_optimal(profile, cost):
    best = make_plan(Optimal(), profile, cost).predicted.iteration_s
    for name, planner in STRATEGIES.items():
        assert make_plan(planner, profile, cost).predicted.iteration_s >= best - 1e-12 - 1e-9 * best, name


@given(profiles(min_tensors=20, max_tensors=400), costs)
def test_fast_paths_match_exhaustive_dp(profile, cost):
    pb = prefix_bytes(profile)
    _, slow = _exhaustive(profile.ready_s, pb, cost)
    _, pruned = _pruned(profile.ready_s, pb, cost)
    assert close(pruned, slow)
    if isinstance(cost, AlphaBeta):
        _, linear = _linear(profile.ready_s, pb, cost)
        assert close(linear, slow)


@given(profiles(max_tensors=12), alpha_beta_costs)
def test_each_path_equals_brute_force(profile, cost):
    pb = prefix_bytes(profile)
    best = brute_force(profile, cost)
    for path in (_linear, _pruned, _exhaustive):
        ends, f = path(profile.ready_s, pb, cost)
        assert close(iteration_end_s(profile.ready_s, pb, ends, cost), best), path.__name__
        assert close(f, best), path.__name__


@pytest.mark.parametrize("n", [1, 2, 7])
def test_optimal_end_is_reported_end(n):
    from commsched.cost.models import AlphaBeta
    from commsched.types import ModelProfile, TensorSpec

    p = ModelProfile("m", 1, "d", "estimated", 0.01, tuple(TensorSpec(f"t{i}", 1000 * (i + 1), 1e-3) for i in range(n)))
    cost = AlphaBeta(1e-3, 1e-9)
    ends, f = optimal_ends(p.ready_s, [t.bytes for t in p.tensors], cost)
    assert close(f, iteration_end_s(p.ready_s, prefix_bytes(p), ends, cost))


@given(st.data())
def test_exhaustive_and_brute_force_agree_on_tiny(data):
    profile = data.draw(profiles(max_tensors=6))
    cost = data.draw(costs)
    _, f = _exhaustive(profile.ready_s, prefix_bytes(profile), cost)
    assert close(f, brute_force(profile, cost))
