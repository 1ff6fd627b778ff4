"""The contention-aware simulator extends the plain one: equal at slowdown 0, never faster above."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES
from commsched.sim.contention import simulate_contended
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
    assert [(round(s.start_s, 12), round(s.end_s, 12)) for s in a.allreduces] == [
        (round(s.start_s, 12), round(s.end_s, 12)) for s in b.allreduces
    ]


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


@given(profiles(max_tensors=30), costs, st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_the_contended_planner_is_never_predicted_slower_than_any_strategy(profile, cost, cs, ms):
    from commsched.planners.contended import Contended

    ends = Contended(cs, ms).ends(profile, cost)
    mine = simulate_contended(profile, ends, cost, cs, ms).iteration_s
    for name, planner in STRATEGIES.items():
        theirs = simulate_contended(profile, planner.ends(profile, cost), cost, cs, ms).iteration_s
        assert mine <= theirs * (1 + 1e-12), name


@given(profiles(max_tensors=30), costs)
def test_without_contention_the_contended_planner_is_the_optimum(profile, cost):
    from commsched.planners.contended import Contended

    ends = Contended().ends(profile, cost)
    optimal = STRATEGIES["optimal"].ends(profile, cost)
    assert close(simulate(profile, ends, cost).iteration_s, simulate(profile, optimal, cost).iteration_s)


def test_the_contended_planner_finds_what_optimal_misses_under_contention():
    """Hand-made: contention turns the plain optimum (overlap a's all-reduce with b's compute) into a loss.

    Tensors a (1 s backward, 100 B) then b (3 s, 1 B); T(M) = 0.5 s + 0.015 s/B x M, so T(a) = 2 s,
    T(b) = 0.515 s, T(a+b) = 2.015 s. Two buckets overlap T(a) with b's compute, and while it runs
    compute goes at 1/(1 + c): b's compute ends at 1 + 2 + (3 - 2/(1 + c)), then T(b). One bucket
    ends at 1 + 3 + 2.015. At c = 0 two buckets win (4.516 s vs 6.016 s, forward 1 ms included);
    at c = 4 one does (6.116 s vs 6.016 s).
    """
    from commsched.planners.contended import Contended

    p = ModelProfile("m", 1, "d", "estimated", 1e-3, (TensorSpec("a", 100, 1.0), TensorSpec("b", 1, 3.0)))
    cost = AlphaBeta(0.5, 0.015)
    assert STRATEGIES["optimal"].ends(p, cost) == (1, 2)
    assert abs(simulate_contended(p, (1, 2), cost, 4.0).iteration_s - 6.116) < 1e-9
    assert abs(simulate_contended(p, (2,), cost, 4.0).iteration_s - 6.016) < 1e-9
    assert Contended(4.0).ends(p, cost) == (2,)
    assert Contended(0.0).ends(p, cost) == (1, 2)


@pytest.mark.parametrize("bad", [{"compute_slowdown": -0.1}, {"comm_slowdown": float("nan")}, {"max_passes": 0}])
def test_the_contended_planner_rejects_bad_parameters(bad):
    from commsched.planners.contended import Contended

    with pytest.raises(CommschedError):
        Contended(**bad)
