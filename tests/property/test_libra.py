"""LIBRA's programme: Theorem 1's bound (Eq. 20) against brute force, and the co-optimised form."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.contention import ClusterResources, GridContention, GridEntry, ResourceConfig, default_grid
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
