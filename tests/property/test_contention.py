"""The contention-aware simulator extends the plain one: equal at slowdown 0, never faster above."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES
from commsched.sim.events import simulate_contended
from commsched.sim.timeline import simulate
from commsched.types import ModelProfile, TensorSpec
from tests.conftest import costs, profiles


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-15


@given(profiles(max_tensors=40), costs, st.sampled_from(sorted(STRATEGIES)))
def test_no_contention_is_the_plain_simulator(profile, cost, name):
    ends = STRATEGIES[name].ends(profile, cost)
    a, b = simulate(profile, ends, cost), simulate_contended(profile, ends, cost, 0.0)
    assert close(a.iteration_s, b.iteration_s) and close(a.comm_s, b.comm_s)
    assert len(a.allreduces) == len(b.allreduces)
    # Compared with a relative tolerance: rounding both to fixed decimals fails when the two
    # differ by one ulp across a rounding boundary.
    for x, y in zip(a.allreduces, b.allreduces):
        assert close(x.start_s, y.start_s) and close(x.end_s, y.end_s), (x, y)


@given(
    profiles(max_tensors=40), costs, st.sampled_from(sorted(STRATEGIES)),
    st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0),
)
def test_more_contention_is_never_faster(profile, cost, name, c1, c2, m1, m2):
    (c_lo, c_hi), (m_lo, m_hi) = sorted((c1, c2)), sorted((m1, m2))
    ends = STRATEGIES[name].ends(profile, cost)
    a = simulate_contended(profile, ends, cost, c_lo, m_lo).iteration_s
    b = simulate_contended(profile, ends, cost, c_hi, m_hi).iteration_s
    assert b >= a * (1 - 1e-9)


def test_hand_worked_slowdown():
    # forward 1 s; tensor a (1 s of backward) then b (2 s). wfbp: a's all-reduce runs 2..4 s (T = 2 s)
    # and slows b's compute by 2x for 2 s: b advances 1 s of work by t = 4, then 1 s more: ready at 5.
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0), TensorSpec("b", 10, 2.0)))
    tl = simulate_contended(p, (1, 2), AlphaBeta(2.0, 0.0), compute_slowdown=1.0)
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 4.0), (5.0, 7.0)]
    assert tl.iteration_s == pytest.approx(7.0) and tl.compute_s == pytest.approx(5.0)
    # the other way round: a's all-reduce runs at half speed while b computes (2..4 s), then full speed
    tl = simulate_contended(p, (1, 2), AlphaBeta(2.0, 0.0), comm_slowdown=1.0)
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 5.0), (5.0, 7.0)]
    assert tl.compute_s == pytest.approx(4.0)


def test_bad_slowdown():
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0),))
    with pytest.raises(CommschedError):
        simulate_contended(p, (1,), AlphaBeta(1.0, 0.0), -0.5)
    with pytest.raises(CommschedError):
        simulate_contended(p, (1,), AlphaBeta(1.0, 0.0), 0.0, float("inf"))
