"""Layer ranking (OSF Section 4.1): what a layer's gradients cost in non-overlapped communication."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import AlgorithmCost, LinkParams
from commsched.planners import planner
from commsched.types import ModelProfile, TensorSpec
from commsched.planners.whatif import layer_of, rank_layers, scaling_factors
from tests.conftest import alpha_beta_costs, profiles


def _cluster(cost) -> ClusterSpec:
    return ClusterSpec("test", 4, cost)


@given(profiles(max_tensors=8), alpha_beta_costs)
@settings(max_examples=60, deadline=None)
def test_under_optimal_no_layer_saves_less_than_nothing_or_more_than_all(profile, cost):
    # profiles() names every tensor layerI.weight: one tensor per layer
    r = rank_layers(profile, _cluster(cost), planner("optimal"))
    assert len(r.layers) == len(profile.tensors)
    noc = r.non_overlapped_s
    for c in r.layers:
        assert -1e-12 <= c.saved_s <= noc + 1e-12, (c, noc)
    assert [c.saved_s for c in r.layers] == sorted((c.saved_s for c in r.layers), reverse=True)


@given(profiles(min_tensors=2, max_tensors=8), alpha_beta_costs)
@settings(max_examples=40, deadline=None)
def test_a_layers_saving_is_the_iteration_without_its_bytes(profile, cost):
    from commsched.planners.compare import compare

    cluster = _cluster(cost)
    r = rank_layers(profile, cluster, planner("wfbp"))
    top = r.layers[0]
    cheaper = replace(profile, tensors=tuple(replace(t, bytes=1) if t.name in top.tensors else t for t in profile.tensors))
    without = compare(cheaper, cluster, [planner("wfbp")]).results["wfbp"].timeline.iteration_s
    assert abs(top.saved_s - (r.iteration_s - without)) <= 1e-12


def test_a_layer_is_its_tensors_owner_and_groups_them():
    assert layer_of("features.0.weight") == "features.0"
    assert layer_of("bias") == "bias"
    big, small = 400_000_000, 4_000
    tensors = (
        TensorSpec("fc.bias", small, 0.0),
        TensorSpec("fc.weight", big, 0.001),
        TensorSpec("conv.weight", small, 0.05),
        TensorSpec("conv.bias", small, 0.0),
    )
    p = ModelProfile("toy", 32, "test", "estimated", 0.03, tensors)
    cluster = ClusterSpec("t", 8, AlgorithmCost("ring", LinkParams(1e-5, 1e-9), 8))
    r = rank_layers(p, cluster, planner("optimal"))
    assert [c.layer for c in r.layers] == ["fc", "conv"]
    assert r.layers[0].tensors == ("fc.bias", "fc.weight") and r.layers[0].bytes == big + small
    assert r.layers[0].saved_s > 0.5 * r.non_overlapped_s > 0
    sf = scaling_factors([p], cluster, (1, 8), planner("optimal"))["toy"]
    assert sf[1] == 1.0 and sf[8] < 1.0
