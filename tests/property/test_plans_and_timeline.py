"""Every plan covers each tensor once in ready order; timelines obey the simulator's invariants;
profiles, plans and clusters survive a JSON round trip."""

from __future__ import annotations

import json

import pytest

from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import ClusterSpec, cluster_from_json
from commsched.errors import CommschedError
from commsched.cost.models import ALGORITHMS, AlgorithmCost, LinkParams
from commsched.formats.io import plan_from_json, plan_to_json, profile_from_json, profile_to_json
from commsched.planners import STRATEGIES, make_plan
from commsched.sim.timeline import ends_of_plan, simulate
from tests.conftest import costs, profiles

EPS = 1e-12


@given(profiles(max_tensors=40), costs, st.sampled_from(sorted(STRATEGIES)))
def test_plan_covers_every_tensor_once_in_ready_order(profile, cost, name):
    plan = make_plan(STRATEGIES[name], profile, cost)
    assert plan.tensor_order == profile.names
    assert all(b.tensors for b in plan.buckets)
    by_name = {t.name: t.bytes for t in profile.tensors}
    assert all(b.bytes == sum(by_name[n] for n in b.tensors) for b in plan.buckets)


@given(profiles(max_tensors=40), costs, st.sampled_from(sorted(STRATEGIES)))
def test_timeline_invariants(profile, cost, name):
    plan = make_plan(STRATEGIES[name], profile, cost)
    ends = ends_of_plan(profile, plan)
    tl = simulate(profile, ends, cost)
    ready = profile.ready_s
    ars = tl.allreduces
    assert len(ars) == len(plan.buckets)
    for span, end in zip(ars, ends):
        assert span.start_s >= ready[end - 1] - EPS  # never before its bucket is ready
        assert span.end_s >= span.start_s
    for a, b in zip(ars, ars[1:]):
        assert b.start_s >= a.end_s - EPS  # all-reduces never overlap
    backward_end = profile.forward_s + profile.backward_s
    assert tl.iteration_s >= backward_end - EPS
    assert tl.iteration_s >= sum(s.duration_s for s in ars) - EPS
    assert abs(tl.comm_s - sum(s.duration_s for s in ars)) <= 1e-9 * max(tl.comm_s, 1)
    assert tl.non_overlapped_comm_s >= 0  # never a rounding below 0 (printed as -0.00)
    assert abs(tl.iteration_s - (backward_end + tl.non_overlapped_comm_s + profile.optimizer_s)) <= 1e-9 * tl.iteration_s + EPS
    assert plan.predicted.iteration_s == tl.iteration_s


@given(profiles(max_tensors=30))
def test_profile_json_round_trip(profile):
    assert profile_from_json(json.loads(json.dumps(profile_to_json(profile)))) == profile


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)))
def test_plan_json_round_trip(profile, cost, name):
    plan = make_plan(STRATEGIES[name], profile, cost)
    back = plan_from_json(json.loads(json.dumps(plan_to_json(plan))))
    assert back == plan


@given(
    st.sampled_from(ALGORITHMS),
    st.integers(1, 4096),
    st.floats(0, 1e-3),
    st.floats(0, 1e-8),
    st.floats(0, 1e-9),
    costs,
)
def test_cluster_json_round_trip(algo, workers, a, b, g, other_cost):
    for model in (AlgorithmCost(algo, LinkParams(a, b, g), workers), other_cost):
        c = ClusterSpec("c", workers, model)
        doc = json.loads(json.dumps(c.to_json()))
        if workers > 1 and all(model.time_s(m) == 0 for m in (1, 1 << 10, 1 << 20, 1 << 30)):
            with pytest.raises(CommschedError, match="takes 0 s at every size"):
                cluster_from_json(doc)
        else:
            assert cluster_from_json(doc).to_json() == c.to_json()


def test_one_worker_has_no_non_overlapped_communication_not_a_rounding_below_0():
    """Ready times are running sums and backward_s a plain sum: 0.1 + 0.1 + 0.2 + 0.3 is 0.7 one way
    and 0.7000000000000001 the other, and `plan --workers 1` printed -0.00 before the clamp."""
    from commsched.types import ModelProfile, TensorSpec

    class Free:
        def time_s(self, nbytes: int) -> float:
            return 0.0

    tensors = tuple(TensorSpec(f"t{i}", 4, b) for i, b in enumerate((0.1, 0.2, 0.3)))
    profile = ModelProfile("rounding", 1, "V100", "estimated", 0.1, tensors)
    assert profile.ready_s[-1] < profile.forward_s + profile.backward_s  # the case this test is about
    tl = simulate(profile, [3], Free())
    assert tl.non_overlapped_comm_s == 0.0 and f"{tl.non_overlapped_comm_s:.2f}" == "0.00"
