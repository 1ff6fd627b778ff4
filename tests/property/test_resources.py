"""The resource simulator and the resource planners: degenerate cases equal the existing simulators,
rs-grid is the best uniform config, rs-heuristic follows the paper's rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import preset
from commsched.cost.resource_models import ClusterResources, ConstantContention, GridContention, GridEntry, ResourceConfig, default_grid
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES, DDP, RSGrid, RSHeuristic, make_plan
from commsched.planners.resources import run_events
from commsched.sim.events import simulate_contended, simulate_resources
from commsched.sim.timeline import simulate
from tests.conftest import costs, profiles

R = ResourceConfig
DEFAULT = R(2, 256)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-15


def same(a, b):
    assert close(a.iteration_s, b.iteration_s) and close(a.compute_s, b.compute_s)
    for x, y in zip(a.allreduces, b.allreduces, strict=True):
        assert close(x.start_s, y.start_s) and close(x.end_s, y.end_s), (x, y)


@st.composite
def grids(draw) -> ClusterResources:
    """A random grid over a few configs (factors from fast-and-greedy to slow-and-light)."""
    cfgs = draw(st.lists(st.sampled_from(default_grid()), min_size=1, max_size=5, unique=True))
    entries = []
    for c in cfgs:
        pts = sorted(draw(st.sets(st.integers(1, 10**9), min_size=1, max_size=3)))
        rel = tuple((b, draw(st.floats(0.5, 2.0))) for b in pts)
        # overlap factors below 1 too: all-reduces faster beside compute than alone (against
        # LIBRA's Assumption 2), which the joint search's order by f + kappa p must keep exact
        entries.append((c, GridEntry(rel, draw(st.floats(1.0, 4.0)), draw(st.floats(0.5, 1.5)))))
    return ClusterResources(tuple(cfgs), cfgs[0], GridContention(tuple(entries)))


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_constant_model_is_the_contended_simulator(profile, cost, name, c, m):
    ends = STRATEGIES[name].ends(profile, cost)
    res = ClusterResources((DEFAULT, R(1, 64)), DEFAULT, ConstantContention(c, m))
    configs = [DEFAULT if j % 2 else R(1, 64) for j in range(len(ends))]  # configs do not matter to it
    same(simulate_resources(profile, ends, cost, res, configs), simulate_contended(profile, ends, cost, c, m))


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)))
def test_no_contention_is_the_plain_simulator(profile, cost, name):
    ends = STRATEGIES[name].ends(profile, cost)
    res = ClusterResources((DEFAULT,), DEFAULT, ConstantContention())
    same(simulate_resources(profile, ends, cost, res, [DEFAULT] * len(ends)), simulate(profile, ends, cost))


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), st.floats(1.0, 3.0), st.floats(1.0, 2.0))
def test_a_grid_of_one_flat_entry_is_the_constant_model(profile, cost, name, cf, of):
    ends = STRATEGIES[name].ends(profile, cost)
    grid = ClusterResources((DEFAULT,), DEFAULT, GridContention(((DEFAULT, GridEntry(((1, 1.0),), cf, of)),)))
    const = ClusterResources((DEFAULT,), DEFAULT, ConstantContention(cf - 1.0, of - 1.0))
    cfg = [DEFAULT] * len(ends)
    same(simulate_resources(profile, ends, cost, grid, cfg), simulate_resources(profile, ends, cost, const, cfg))


@given(profiles(max_tensors=25), costs, grids())
def test_rs_grid_is_the_best_uniform_config(profile, cost, res):
    ends, configs = RSGrid().assign(profile, cost, res)
    assert ends == DDP().ends(profile, cost) and len(set(configs)) == 1
    got = max(run_events(profile, ends, cost, res, configs)[1])
    for c in res.allowed:
        assert got <= max(run_events(profile, ends, cost, res, [c] * len(ends))[1]) * (1 + 1e-12)


@given(profiles(max_tensors=25), costs, grids())
def test_rs_heuristic_follows_the_rule(profile, cost, res):
    ends, configs = RSHeuristic().assign(profile, cost, res)
    assert ends == DDP().ends(profile, cost) and len(configs) == len(ends)
    model = res.contention
    pb = [0]
    for t in profile.tensors:
        pb.append(pb[-1] + t.bytes)
    last_bytes = pb[ends[-1]] - pb[ends[-2] if len(ends) > 1 else 0]
    fastest = min(float(model.allreduce_s(cost, last_bytes, c, False)) for c in res.allowed)
    assert float(model.allreduce_s(cost, last_bytes, configs[-1], False)) == fastest


@pytest.mark.parametrize("t1_s, want", [(1.0, "2x256"), (3.0, "1x64")])
def test_rs_heuristic_takes_the_least_config_that_ends_in_time(t1_s, want):
    """Buckets [t0], [t1, t2] (DDP's 1 MiB first cap); 2 MB take 2 s at 1x64 (compute at full
    speed beside it) and 0.5 s at 2x256 (compute at half speed). Bucket 0 launches at 1 s with
    t1 + t2 of compute left: with t1 = 1 s backward ends at 2.5 s, before 1x64's all-reduce (3 s),
    so 2x256 is needed (it ends at 1.5 s, backward at 2.75 s); with t1 = 3 s, 1x64 ends in time."""
    from commsched.cost.models import AlphaBeta
    from commsched.types import ModelProfile, TensorSpec

    prof = ModelProfile("m", 1, "d", "estimated", 0.0, (TensorSpec("t0", 2 * 10**6, 1.0), TensorSpec("t1", 2 * 10**6, t1_s), TensorSpec("t2", 2 * 10**6, 0.5)))
    light, heavy = R(1, 64), R(2, 256)
    res = ClusterResources((light, heavy), heavy, GridContention(((light, GridEntry(((1, 1.0),), 1.0)), (heavy, GridEntry(((1, 0.25),), 2.0)))))
    ends, configs = RSHeuristic().assign(prof, AlphaBeta(0.0, 1e-6), res)
    assert ends == (1, 3)
    assert [c.short for c in configs] == [want, "2x256"]  # the last: the fastest


def test_resource_planners_need_a_cluster_with_resources():
    from commsched.cost.models import AlphaBeta as AB
    from commsched.types import ModelProfile, TensorSpec

    p = ModelProfile("m", 1, "d", "estimated", 1e-3, (TensorSpec("a", 10**6, 1e-3),))
    with pytest.raises(CommschedError, match="needs a cluster that declares them"):
        make_plan(RSGrid(), p, AB(1e-4, 1e-9))


def test_existing_strategies_on_a_resource_cluster_are_scored_at_the_default():
    from commsched.profile.zoo_profile import zoo_profile

    c = preset("rs-2xv100s-pcie")
    prof = zoo_profile("resnet18", 32, "V100S")
    plan = make_plan(DDP(), prof, c.allreduce, resources=c.resources)
    assert all(b.resources is None for b in plan.buckets)
    ends = DDP().ends(prof, c.allreduce)
    want = simulate_resources(prof, ends, c.allreduce, c.resources, [c.resources.default] * len(ends)).iteration_s
    assert plan.predicted.iteration_s == pytest.approx(want)
    rs = make_plan(RSHeuristic(), prof, c.allreduce, resources=c.resources)
    assert all(b.resources is not None for b in rs.buckets)
    assert rs.predicted.iteration_s < plan.predicted.iteration_s  # the point of it, on the paper's testbed


def _bucketings(n: int):
    """Every contiguous bucketing of n tensors as bucket ends."""
    import itertools

    for cuts in itertools.product((False, True), repeat=n - 1):
        yield tuple(i + 1 for i, c in enumerate(cuts) if c) + (n,)


@given(profiles(max_tensors=5), costs, grids(), st.sampled_from([0.0, 0.05, 0.5]))
def test_joint_is_the_brute_force_optimum(profile, cost, res, tol):
    """Exact at tolerance 0; within it otherwise, where a coarse run may be proven by the
    optimistic one instead of refined (the search alone, without Joint's known plans)."""
    import itertools

    from commsched.planners import Joint
    from commsched.planners.resources import joint_search

    ends, configs = Joint(tolerance=tol).assign(profile, cost, res)
    got = max(run_events(profile, ends, cost, res, configs)[1])
    # the search alone, unbounded, finds it too, and says what it ends at
    e2, c2, end2 = joint_search(profile, cost, res, tol)
    assert abs(max(run_events(profile, e2, cost, res, c2)[1]) - end2) <= 1e-9 * end2 + 1e-15
    got = max(got, end2)
    best = min(
        max(run_events(profile, e, cost, res, cs)[1])
        for e in _bucketings(len(profile.tensors))
        for cs in itertools.product(res.allowed, repeat=len(e))
    )
    assert got <= best * (1 + tol) * (1 + 1e-9) + 1e-15


@given(profiles(max_tensors=12), costs, grids(), st.sampled_from([0.0, 0.05]))
def test_joint_is_never_beaten(profile, cost, res, tol):
    """Not by the resource planners, nor by any strategy's buckets at any one config, beyond its tolerance."""
    from commsched.planners import Joint

    ends, configs = Joint(tolerance=tol).assign(profile, cost, res)
    got = max(run_events(profile, ends, cost, res, configs)[1])
    rivals = [RSGrid().assign(profile, cost, res), RSHeuristic().assign(profile, cost, res)]
    rivals += [(p.ends(profile, cost), None) for p in STRATEGIES.values() if p.name != "optimal"]
    for e, cs in rivals:
        for c in [None] if cs is not None else res.allowed:
            t = max(run_events(profile, e, cost, res, cs if cs is not None else [c] * len(e))[1])
            assert got <= t * (1 + tol) * (1 + 1e-9) + 1e-15


@given(profiles(max_tensors=10), costs, grids())
def test_dropping_dominated_configs_keeps_the_optimum(profile, cost, res):
    from commsched.planners.resources import joint_search

    _, _, with_drop = joint_search(profile, cost, res, 0.0, drop_dominated=True)
    _, _, without = joint_search(profile, cost, res, 0.0, drop_dominated=False)
    assert with_drop == pytest.approx(without, rel=1e-12, abs=1e-15)


def test_dominated_options():
    import numpy as np

    from commsched.planners.optimal_contended import _dominated

    one = lambda *v: np.array(v, dtype=float)[:, None]  # noqa: E731  (one bucket size)
    # options a, b as (T alone, slow, compute factor c); in flight to its end an all-reduce covers T s / c of compute
    # a = (2, 1, 2) covers 1 s in 2 s; b = (1, 1, 1) covers 1 s in 1 s: b ends sooner, as far along: a is useless
    assert _dominated(one(2.0, 1.0), one(1.0, 1.0), one(2.0, 1.0)).ravel().tolist() == [True, False]
    # a = (2, 1, 1) covers 2 s: b ends sooner but with less compute done: both stay
    assert _dominated(one(2.0, 1.0), one(1.0, 1.0), one(1.0, 1.0)).ravel().tolist() == [False, False]
    # b slower beside compute (slow 3): not dominating a = (2, 1, 2) although faster alone
    assert _dominated(one(2.0, 1.0), one(1.0, 3.0), one(2.0, 1.0)).ravel().tolist() == [False, False]
    # equal: the first stays
    assert _dominated(one(1.0, 1.0), one(1.0, 1.0), one(2.0, 2.0)).ravel().tolist() == [False, True]


@given(profiles(max_tensors=12), costs, grids())
def test_joint_is_never_predicted_slower_than_the_planners_it_claims_to_beat(profile, cost, res):
    """Issue 31: ``joint`` (at its default tolerance) is claimed to be the joint optimum, so on the
    same inputs it is never predicted slower than libra, rs-grid, rs-heuristic or stock DDP (its
    default buckets, every all-reduce at the library default config) — not even within the
    tolerance: their plans seed it."""
    from commsched.planners import Joint, Libra

    def predicted(plan):
        ends, configs = plan
        return max(run_events(profile, ends, cost, res, configs)[1])

    got = predicted(Joint().assign(profile, cost, res))
    ddp_ends = DDP().ends(profile, cost)
    rivals = {
        "libra": Libra().assign(profile, cost, res),
        "rs-grid": RSGrid().assign(profile, cost, res),
        "rs-heuristic": RSHeuristic().assign(profile, cost, res),
        "ddp": (ddp_ends, (res.default,) * len(ddp_ends)),
    }
    for name, plan in rivals.items():
        assert got <= predicted(plan), (name, got, predicted(plan))


def test_joint_is_not_slower_than_libra_on_resnet18():
    """The case the issue found: resnet18, batch 16, on rs-2xv100s-pcie libra's plan was predicted
    at 32.28 ms and joint's at 32.42 ms (joint's 1% tolerance let it stop short of libra's)."""
    from commsched.planners import Joint, Libra
    from commsched.profile.zoo_profile import zoo_profile

    c = preset("rs-2xv100s-pcie")
    prof = zoo_profile("resnet18", 16, "V100S")
    t = {p.name: make_plan(p, prof, c.allreduce, resources=c.resources).predicted.iteration_s for p in (Joint(), Libra())}
    assert t["joint"] <= t["libra"]
