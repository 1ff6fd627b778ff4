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
