"""LIBRA's programme: Theorem 1's bound (Eq. 20) against brute force, and the co-optimised form."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.resource_models import ClusterResources, GridContention, GridEntry, ResourceConfig, default_grid
from commsched.errors import CommschedError
from commsched.planners import Libra
from commsched.planners.libra import libra_fixed, libra_joint
from commsched.planners.resources import joint_search, run_events
from tests.conftest import costs, profiles


@st.composite
def lib_grids(draw) -> ClusterResources:
    """Grids within LIBRA's Assumptions 1-3: an all-reduce as fast beside compute as alone
    (overlap factor 1), one contention factor per config for all compute."""
    cfgs = draw(st.lists(st.sampled_from(default_grid()), min_size=1, max_size=3, unique=True))
    entries = tuple((c, GridEntry(((1, draw(st.floats(0.3, 3.0))),), draw(st.floats(1.0, 4.0)))) for c in cfgs)
    return ClusterResources(tuple(cfgs), cfgs[0], GridContention(entries))


def _backward_end(profile, ends, cost, res, configs):
    return max(run_events(profile, ends, cost, res, configs)[1]) - profile.forward_s


@st.composite
def fusions(draw, profile):
    n = len(profile.tensors)
    cuts = draw(st.lists(st.booleans(), min_size=n - 1, max_size=n - 1))
    return tuple(i + 1 for i, c in enumerate(cuts) if c) + (n,)


@given(st.data(), profiles(max_tensors=6), costs, lib_grids(), st.sampled_from([4, 20, 150]))
def test_theorem_1_bound_against_brute_force(data, profile, cost, res, z):
    ends = data.draw(fusions(profile))
    k = len(ends)
    configs, value = libra_fixed(profile, ends, cost, res, z)
    got = _backward_end(profile, ends, cost, res, configs)
    best = min(_backward_end(profile, ends, cost, res, cs) for cs in itertools.product(res.allowed, repeat=k))
    assert got >= best * (1 - 1e-9) - 1e-15  # it is a schedule
    assert got <= (1 + (k - 1) / z) * best * (1 + 1e-9) + 1e-15  # Eq. 20
    # the programme's own value is that of a schedule whose all-reduces start at chunk edges: no
    # better than the real run of its configs, whose all-reduces start as soon as they can
    assert value >= got * (1 - 1e-9) - 1e-15


@given(profiles(max_tensors=8), costs, lib_grids(), st.integers(1, 4))
def test_co_optimised_programme_is_a_valid_schedule_no_better_than_the_optimum(profile, cost, res, k):
    ends, configs, value = libra_joint(profile, cost, res, k, 40)
    assert len(ends) <= k and ends[-1] == len(profile.tensors) and list(ends) == sorted(set(ends))
    got = _backward_end(profile, ends, cost, res, configs)
    assert value >= got * (1 - 1e-9) - 1e-15
    e, c, end_s = joint_search(profile, cost, res, 0.0)
    assert got >= (end_s - profile.forward_s) * (1 - 1e-9) - 1e-15


def test_bad_parameters():
    with pytest.raises(CommschedError, match="Z"):
        Libra(z_chunks=0)
    with pytest.raises(CommschedError, match="fusion"):
        Libra(fusion="magic")


@st.composite
def any_grids(draw) -> ClusterResources:
    """Grids with overlap factors too, so dominance has to hold on all four terms."""
    cfgs = draw(st.lists(st.sampled_from(default_grid()), min_size=1, max_size=5, unique=True))
    entries = tuple(
        (c, GridEntry(((1, draw(st.floats(0.3, 3.0))), (10**6, draw(st.floats(0.3, 3.0)))), draw(st.floats(1.0, 4.0)), draw(st.floats(1.0, 2.0))))
        for c in cfgs
    )
    return ClusterResources(tuple(cfgs), cfgs[0], GridContention(entries))


@given(profiles(max_tensors=8), costs, any_grids(), st.integers(1, 4), st.sampled_from([5, 30]))
def test_dropping_dominated_configs_changes_nothing(profile, cost, res, k, z):
    a = libra_joint(profile, cost, res, k, z, prune=True)
    b = libra_joint(profile, cost, res, k, z, prune=False)
    assert a[2] == pytest.approx(b[2], rel=1e-12, abs=1e-15)


@given(profiles(min_tensors=2, max_tensors=8), costs, lib_grids())
def test_groups_end_only_where_compute_follows(profile, cost, res):
    ends, _, _ = libra_joint(profile, cost, res, 4, 20)
    n = len(profile.tensors)
    if sum(t.backward_s for t in profile.tensors) > 0:
        assert all(e == n or profile.tensors[e].backward_s > 0 for e in ends)


def test_which_configs_are_dominated():
    import numpy as np

    from commsched.planners.libra import _undominated

    # columns: two group sizes; rows: configs (T_o, T_a equal), with their compute factors
    t = np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 4.0], [0.9, 1.8]])
    f = np.array([1.0, 4.0, 2.0, 4.5])
    keep = _undominated(t, t, f)
    # row 2 is beaten by row 0 (no slower, lighter, hides in no more chunks); row 1 (heavy but
    # hidden in a quarter of the compute) and row 3 (fastest, heaviest) by nothing; row 0 by
    # nothing (row 3 is lighter on nothing)
    assert keep.tolist() == [True, True, False, True]
    # faster and lighter but needing more compute to hide: not dominating
    assert _undominated(np.array([[1.0], [0.9]]), np.array([[1.0], [0.9]]), np.array([4.0, 1.0])).tolist() == [True, True]
    # identical configs: the first stays
    assert _undominated(np.array([[1.0], [1.0]]), np.array([[1.0], [1.0]]), np.array([2.0, 2.0])).tolist() == [True, False]
