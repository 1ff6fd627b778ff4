"""The resource simulator and planners on a stock-NCCL cluster: each bucket runs as the config NCCL
uses at its size (commsched.cost.nccl_launch), large buckets as asked (the old numbers exactly),
small ones on fewer channels; the joint search plans with the same terms the simulator scores."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from commsched.cost.resource_models import ClusterResources, GridContention, GridEntry, ResourceConfig, default_grid
from commsched.cost.nccl_launch import NcclSetting
from commsched.planners import STRATEGIES, DDP, Joint
from commsched.planners.base import plan_and_timeline
from commsched.planners.resources import joint_search, run_events
from commsched.sim.events import resource_terms, simulate_resources
from commsched.sim.timeline import prefix_bytes
from tests.conftest import costs, profiles

R = ResourceConfig
SMALL_SET = (R(1, 64), R(2, 64), R(1, 128), R(2, 128))  # closed under NCCL's lowering and halving


@st.composite
def entries(draw, configs):
    out = []
    for c in configs:
        pts = sorted(draw(st.sets(st.integers(1, 10**8), min_size=1, max_size=3)))
        rel = tuple((b, draw(st.floats(0.5, 2.0))) for b in pts)
        out.append((c, GridEntry(rel, draw(st.floats(1.0, 4.0)), draw(st.floats(0.8, 1.5)))))
    return GridContention(tuple(out))


@st.composite
def paired(draw, configs=default_grid(), nthreads=256, mechanisms=("ctas",)):
    """The same grid run by stock NCCL and by a library that runs configs as asked."""
    grid = draw(entries(configs))
    channels = max(c.blocks for c in configs)  # the tuner reaches no more than NCCL's own channels
    setting = NcclSetting(channels, nthreads, mechanism=draw(st.sampled_from(mechanisms)))
    default = R(channels, nthreads)
    return ClusterResources(configs, default, grid, "nccl", setting), ClusterResources(configs, default, grid, "modified-nccl")


@given(profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)), paired(), st.data())
def test_large_buckets_keep_the_old_numbers_exactly(profile, cost, name, pair, data):
    """Every bucket at least 256 KiB: above 4 x 512 x 64 bytes and 13 cells of 16 KiB, so no
    config of the paper's grid is lowered, and stock NCCL scores as the config-as-asked library."""
    stock, asked = pair
    big = replace(profile, tensors=tuple(replace(t, bytes=max(t.bytes, 1 << 18)) for t in profile.tensors))
    ends = STRATEGIES[name].ends(big, cost)
    configs = data.draw(st.lists(st.sampled_from(default_grid()), min_size=len(ends), max_size=len(ends)))
    a = simulate_resources(big, ends, cost, stock, configs)
    b = simulate_resources(big, ends, cost, asked, configs)
    assert a == b


@given(profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)), paired(mechanisms=("ctas", "tuner")), st.data())
def test_each_bucket_runs_as_the_config_nccl_uses_at_its_size(profile, cost, name, pair, data):
    stock, asked = pair
    ends = STRATEGIES[name].ends(profile, cost)
    configs = data.draw(st.lists(st.sampled_from(stock.allowed), min_size=len(ends), max_size=len(ends)))
    pb = prefix_bytes(profile)
    sizes = [pb[e] - pb[ends[j - 1] if j else 0] for j, e in enumerate(ends)]
    runs = [stock.effective(c, b) for c, b in zip(configs, sizes)]
    assert resource_terms(pb, ends, cost, stock, configs) == resource_terms(pb, ends, cost, asked, runs)
    for c, b, r in zip(configs, sizes, runs):
        assert r.blocks <= c.blocks and r.threads_per_block <= c.threads_per_block
        if b >= stock.nccl.full_from_bytes(c.blocks, c.threads_per_block):
            assert r == c  # large enough: unchanged
        if b <= 16 * 1024:
            assert r.blocks == 1  # one 16 KiB cell: one channel
        if stock.nccl.mechanism == "ctas" and c.blocks >= 2 and b < c.blocks * c.threads_per_block * 64:
            assert r.blocks < c.blocks  # NCCL's bytes-per-channel rule


@given(st.integers(1, 16 * 1024), paired())
def test_a_tiny_bucket_runs_on_one_channel_and_slows_compute_as_that(nbytes, pair):
    stock, _ = pair
    for c in stock.allowed:
        r = stock.effective(c, nbytes)
        assert r.blocks == 1
        assert stock.compute_factor(c, nbytes) == stock.contention.compute_factor(r)


@settings(max_examples=60, deadline=None)
@given(profiles(max_tensors=3), costs, paired(SMALL_SET, 128, ("ctas", "tuner")))
def test_joint_plans_with_the_terms_the_simulator_scores(profile, cost, pair):
    """The joint search's own end for its plan is the simulator's (it would not be if the search
    scored configs as asked while the simulator lowers them), and it is the brute-force optimum."""
    stock, _ = pair
    e, cs, end_s = joint_search(profile, cost, stock, 0.0)
    assert abs(max(run_events(profile, e, cost, stock, cs)[1]) - end_s) <= 1e-9 * end_s + 1e-15
    ends, configs = Joint(tolerance=0.0).assign(profile, cost, stock)
    got = max(run_events(profile, ends, cost, stock, configs)[1])
    n = len(profile.tensors)
    best = min(
        max(run_events(profile, b, cost, stock, c)[1])
        for b in (tuple(i + 1 for i, cut in enumerate(cuts) if cut) + (n,) for cuts in itertools.product((False, True), repeat=n - 1))
        for c in itertools.product(stock.allowed, repeat=len(b))
    )
    assert got <= best * (1 + 1e-9) + 1e-15


def test_null_resources_are_nccls_own_default_lowered_by_size():
    from commsched.cost.models import AlphaBeta
    from commsched.types import ModelProfile, TensorSpec

    grid = GridContention(tuple((c, GridEntry(((1 << 20, 1.0),), 1.0 + c.threads / 1000)) for c in default_grid()))
    stock = ClusterResources(default_grid(), R(2, 256), grid, "nccl", NcclSetting(2, 256))
    names = []
    for nbytes in (4096, 30 << 20):
        prof = ModelProfile("m", 1, "d", "estimated", 1e-3, (TensorSpec("a", nbytes, 1e-3),))
        plan, tl = plan_and_timeline(DDP(), prof, AlphaBeta(1e-5, 1e-9), resources=stock)
        assert all(b.resources is None for b in plan.buckets)
        names += [s.name for s in tl.allreduces]
    assert names == ["bucket 0 (1 tensors, 2x256, runs 1x64)", "bucket 0 (1 tensors, 2x256)"]
