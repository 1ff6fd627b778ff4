"""OSF / CSF (OSF paper Eq. 1-16) cross-checked against the simulator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given

from commsched.planners import STRATEGIES, make_plan
from commsched.sim.analytic import csf, osf, osf_fusion, osf_fusion_iteration_s, osf_iteration_s
from tests.conftest import costs, profiles


def sim_iter(name, profile, cost):
    return make_plan(STRATEGIES[name], profile, cost).predicted.iteration_s - profile.optimizer_s


def rel(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-15


@given(profiles(max_tensors=40), costs)
def test_osf_without_fusion_is_the_simulated_wfbp(profile, cost):
    assert rel(osf_iteration_s(profile, cost), sim_iter("wfbp", profile, cost))
    assert rel(osf(profile, cost), profile.compute_s / sim_iter("wfbp", profile, cost))


@given(profiles(max_tensors=40), costs)
def test_csf_is_the_simulated_synceasgd(profile, cost):
    assert rel(csf(profile, cost), profile.compute_s / sim_iter("synceasgd", profile, cost))


@given(profiles(max_tensors=40), costs)
def test_osf_fusion_with_unbounded_buffer_is_synceasgd(profile, cost):
    assert rel(osf_fusion_iteration_s(profile, cost, math.inf, math.inf), sim_iter("synceasgd", profile, cost))


@given(profiles(max_tensors=40), costs)
def test_osf_fusion_without_fusion_pays_the_online_wait(profile, cost):
    """Q = 0 sends each layer alone, as wfbp does, but only once the next layer is ready (Eq. 14):
    never faster than the planned wfbp, and slower by exactly those waits when compute dominates."""
    online = osf_fusion_iteration_s(profile, cost, 0, math.inf)
    assert online >= sim_iter("wfbp", profile, cost) * (1 - 1e-12) - 1e-15
    assert osf_fusion(profile, cost, 0) <= osf(profile, cost) * (1 + 1e-12)


def test_osf_fusion_wait_is_the_next_layers_backward():
    from commsched.cost.models import AlphaBeta
    from commsched.types import ModelProfile, TensorSpec

    # Two tensors, cheap communication: wfbp ends at ready_1 + T; online fusion sends tensor 0 at
    # ready_1 too (after waiting t_b of tensor 1), so the two all-reduces run back to back.
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0), TensorSpec("b", 10, 1.0)))
    cost = AlphaBeta(0.1, 0.0)
    assert sim_iter("wfbp", p, cost) == pytest.approx(3.1)
    assert osf_fusion_iteration_s(p, cost, 0, math.inf) == pytest.approx(3.2)


def _three():
    from commsched.cost.models import AlphaBeta
    from commsched.types import ModelProfile, TensorSpec

    # ready at 2, 3, 4 s; every all-reduce takes 0.5 s
    p = ModelProfile("m", 1, "d", "estimated", 1.0, tuple(TensorSpec(f"t{i}", 10, 1.0) for i in range(3)))
    return p, AlphaBeta(0.5, 0.0)


def test_osf_fusion_finite_buffer_hand_worked():
    # Q = 20 B holds two tensors: [t0, t1] is sent when t2 is ready and does not fit (4 s), ends 4.5 s;
    # t2 follows, 5.0 s. The planned bucketing [t0, t1], [t2] ends at 4.5 s: the online buffer waited 1 s.
    p, cost = _three()
    assert osf_fusion_iteration_s(p, cost, 20, math.inf) == pytest.approx(5.0)
    from commsched.sim.timeline import simulate

    assert simulate(p, (2, 3), cost).iteration_s == pytest.approx(4.5)


def test_osf_fusion_timeout_hand_worked():
    # timeout 0.5 s < every next backward (1 s): each tensor waits 0.5 s, then goes alone:
    # 2.5-3.0, 3.5-4.0, then the last without a wait 4.0-4.5.
    p, cost = _three()
    assert osf_fusion_iteration_s(p, cost, math.inf, 0.5) == pytest.approx(4.5)
    # a timeout longer than every wait changes nothing against an unbounded buffer
    assert osf_fusion_iteration_s(p, cost, math.inf, 5.0) == pytest.approx(osf_fusion_iteration_s(p, cost, math.inf, math.inf))
