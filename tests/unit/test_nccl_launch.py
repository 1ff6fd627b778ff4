"""What NCCL 2.30 launches for an all-reduce (commsched.cost.nccl_launch), and stock-NCCL clusters'
resources (ClusterResources with library "nccl"): the numbers are worked by hand from NCCL's
enqueue.cc / tuning.cc / connect.cc rules quoted in the module docstring."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commsched.cost.cluster import cluster_from_json, preset
from commsched.cost.resource_models import (
    ClusterResources,
    ConstantContention,
    GridContention,
    GridEntry,
    LibraContention,
    LibraRate,
    ResourceConfig,
    default_grid,
    resources_from_json,
)
from commsched.cost.models import AlphaBeta
from commsched.cost.nccl_launch import (
    NcclComm,
    NcclSetting,
    comm_channels,
    get_nthreads,
    grouped_sizes,
    launch,
    launched_threads_for,
    scheduled_channels,
    simple_default_nthreads,
)
from commsched.errors import CommschedError

R = ResourceConfig
KIB = 1 << 10


def test_nthreads_variable_is_taken_only_as_a_multiple_of_32_in_range():
    # tuning.cc getNthreads(name, env, 2 * WARP_SIZE, NCCL_SIMPLE_MAX_NTHREADS, default)
    assert get_nthreads(256, 64, 512, 512) == 256
    assert get_nthreads(100, 64, 512, 512) == 512  # not a multiple of 32: the maximum
    assert get_nthreads(1024, 64, 512, 512) == 512
    assert get_nthreads(32, 64, 512, 512) == 64
    assert get_nthreads(None, 64, 512, 256) == 256 and get_nthreads(-2, 64, 512, 256) == 256
    # Ring/Simple's default: 256 when the ring graph is no faster than PCIe Gen3 x16 (12 GB/s)
    assert simple_default_nthreads(12.0, 1) == 256 and simple_default_nthreads(20.0, 2) == 512


def test_min_and_max_ctas_make_the_communicators_channels():
    assert comm_channels(1) == 2  # the ring search's channel doubled (connect.cc)
    assert comm_channels(40) == 64  # at most MAXCHANNELS
    for b in (1, 3, 4, 17, 64):
        assert comm_channels(1, b, b) == b  # min_ctas = max_ctas = B: exactly B, whatever the search found
        assert comm_channels(12, b, b) == b
    assert comm_channels(4, max_ctas=3) == 3 and comm_channels(1, min_ctas=5) == 5
    assert comm_channels(1, min_ctas=9, max_ctas=4) == 4  # init.cc: min above max is set to max
    assert comm_channels(2, max_nchannels=1) == 1 and comm_channels(1, min_nchannels=6) == 6


def test_threads_per_block_by_algorithm_and_protocol():
    big = 1 << 30
    comm = NcclComm(2, 2, nthreads_env=256)
    assert launch(comm, big).threads_per_block == 288  # Ring/Simple: NCCL_NTHREADS + a sync warp
    assert launch(NcclComm(2, 2, nthreads_env=64), big).threads_per_block == 128  # 96, raised to NCCL_MIN_NTHREADS
    assert launch(NcclComm(2, 2, nthreads_env=96), big).threads_per_block == 128
    assert launch(comm, big, "tree").threads_per_block == 640  # "Tree now uses all threads always"
    assert launch(comm, big, "ring", "ll").threads_per_block == 256  # LL: NCCL_NTHREADS, no extra warp
    assert launch(comm, big, "ring", "ll128").threads_per_block == 640  # LL128: its own variable, not NCCL_NTHREADS
    assert launch(NcclComm(2, 2, ll128_nthreads_env=320), big, "ring", "ll128").threads_per_block == 320
    # unset NCCL_NTHREADS: Ring/Simple's topology default, the others their maxima
    assert launch(NcclComm(2, 2, ring_simple_default=256), big).threads_per_block == 288
    assert launch(NcclComm(2, 2), big).threads_per_block == 544
    assert launch(NcclComm(2, 2, ring_simple_default=256), big, "ring", "ll").threads_per_block == 512
    assert [launched_threads_for(t) for t in (64, 96, 128, 256, 512)] == [128, 128, 160, 288, 544]


def test_small_all_reduces_get_fewer_channels_then_fewer_threads():
    comm = NcclComm(2, 4, nthreads_env=256)  # 4 channels x 256 threads x 64 bytes per thread = 64 KiB
    assert launch(comm, 64 * KIB).channels == 4 and launch(comm, 64 * KIB).tuned_channels == 4
    assert launch(comm, 64 * KIB - 4).tuned_channels == 3  # nBytes < nc*nt*64: one channel less
    assert launch(comm, 16 * KIB).tuned_channels == 1 and launch(comm, 16 * KIB).nthreads == 256
    tiny = launch(comm, 4)  # one channel, threads halved while 4 < 1*nt*64 and nt % 128 == 0: 256, 128, 64
    assert (tiny.channels, tiny.nthreads, tiny.threads_per_block) == (1, 64, 128)
    mid = launch(comm, 10 * KIB)  # 10 KiB >= 128*64 = 8 KiB: stops at 128
    assert (mid.channels, mid.nthreads, mid.threads_per_block) == (1, 128, 160)
    # LL's threshold is 8 per thread x nRanks on Ring: 4 ranks, 512 threads, 4 channels -> 64 KiB
    ll = NcclComm(4, 4)
    assert launch(ll, 64 * KIB, "ring", "ll").tuned_channels == 4 and launch(ll, 64 * KIB - 4, "ring", "ll").tuned_channels == 3


def test_the_scheduler_spreads_16_kib_cells():
    # one 16 KiB cell (Simple: 32 KiB of traffic / 2 per byte) per channel at least
    assert scheduled_channels(16 * KIB, 4, 4, 4) == 1
    assert scheduled_channels(16 * KIB + 4, 4, 4, 4) == 2
    # 9 cells on 4 channels: 3 cells per channel (ceil(73728 / 32768)), so 3 channels
    assert scheduled_channels(9 * 16 * KIB, 4, 4, 4) == 3
    assert scheduled_channels(8 * 16 * KIB, 4, 4, 4) == 4
    assert scheduled_channels(25 * 10**6, 4, 4, 4) == 4
    assert scheduled_channels(25 * 10**6, 4, 8, 2) == 2  # capped at the communicator's channels


def test_the_tuner_replaces_the_lowering_but_not_the_cap():
    comm = NcclComm(2, 2, nthreads_env=256)
    assert launch(comm, 1 << 30, tuner_channels=8).channels == 2  # capped at comm->nChannels
    # 20000 bytes: NCCL alone lowers to 20000 // 16384 = 1 channel; the tuner's 4 replace that,
    # and the 2 cells fill 2 of the communicator's channels
    assert launch(comm, 20000).channels == 1
    assert launch(comm, 20000, tuner_channels=4).channels == 2


def test_grouped_all_reduces_reach_the_tuner_as_their_sums():
    # from the smallest up, the next ones under 4x its size join it (enqueue.cc ncclPrepareTasks)
    assert grouped_sizes([1000, 3000, 5000, 100]) == (((3,), 100), ((0, 1), 4000), ((2,), 5000))
    assert grouped_sizes([100, 399, 400]) == (((0, 1), 499), ((2,), 400))
    assert grouped_sizes([]) == ()


def test_bad_inputs_are_errors_naming_them():
    with pytest.raises(CommschedError, match="nthreads.*multiple of 32.*got 100.*run 512"):
        NcclSetting(2, 100)
    with pytest.raises(CommschedError, match="mechanism"):
        NcclSetting(2, 256, mechanism="env")
    with pytest.raises(CommschedError, match="algorithm"):
        launch(NcclComm(2, 2), 1 << 20, "nvls")
    with pytest.raises(CommschedError, match="nbytes"):
        launch(NcclComm(2, 2), 0)


# --- stock-NCCL clusters ------------------------------------------------------------------------

NCCL = NcclSetting(2, 256)


def stock(allowed=default_grid(), model=ConstantContention(0.5, 0.1), setting=NCCL, default=None):
    return ClusterResources(tuple(allowed), default or R(setting.channels, setting.nthreads), model, "nccl", setting)


def test_configs_are_labelled_with_what_nccl_runs():
    res = stock()
    assert res.label(R(2, 256)) == "2x256 (NCCL runs 2x288)"
    assert res.label(R(1, 64)) == "1x64 (NCCL runs 1x128)"
    assert res.launched(R(4, 512)).short == "4x544"
    rs = preset("rs-2xv100s-pcie").resources  # the paper's modified NCCL runs configs as asked
    assert rs.library == "modified-nccl" and rs.label(R(2, 256)) == "2x256" and rs.launched(R(2, 256)) is None


def test_configs_nccl_does_not_take_as_asked_are_refused():
    with pytest.raises(CommschedError, match="config 1x100: threads_per_block.*multiple of 32"):
        stock([R(1, 100), R(2, 256)])
    with pytest.raises(CommschedError, match="1x64 and 1x96 both run as 1x128"):
        stock([R(1, 64), R(1, 96), R(2, 256)])
    with pytest.raises(CommschedError, match="4x256 is not one NCCL .* caps the channels at the communicator's 2"):
        stock([R(2, 256), R(4, 256)], setting=NcclSetting(2, 256, mechanism="tuner"))
    with pytest.raises(CommschedError, match="1x64 and 1x128 both run as 1x640"):  # Tree runs 640 whatever NCCL_NTHREADS says
        stock([R(1, 64), R(1, 128), R(2, 512)], setting=NcclSetting(2, 512, algorithm="tree"))
    with pytest.raises(CommschedError, match="NCCL's own default, 2x256.*not 1x64"):
        stock(default=R(1, 64))
    with pytest.raises(CommschedError, match="needs its \"nccl\" setting"):
        ClusterResources(default_grid(), R(2, 256), ConstantContention(), "nccl")
    with pytest.raises(CommschedError, match="library must be one of"):
        ClusterResources(default_grid(), R(2, 256), ConstantContention(), "gloo")


def test_a_grid_must_score_every_config_nccl_can_run():
    entry = GridEntry(((1 << 20, 1.0),), 2.0)
    # 4x256 runs as 3x256 (and 2x256, 1x256, 1x128, 1x64) for small all-reduces: not in the grid
    grid = GridContention(((R(2, 256), entry), (R(4, 256), entry)))
    with pytest.raises(CommschedError, match="no entry for config 1x64: NCCL 2.30.7 runs config 2x256 as 1x64 for small all-reduces"):
        stock([R(2, 256), R(4, 256)], grid)
    full = GridContention(tuple((c, entry) for c in default_grid()))
    stock(default_grid(), full)  # the paper's grid is closed under NCCL's lowering and halving


def test_effective_config_lowers_small_buckets_only():
    res = stock()
    assert res.effective(R(4, 256), 1 << 20) == R(4, 256)
    assert res.effective(R(4, 256), 40_000) == R(2, 256)  # 40000 // (256 x 64) = 2 channels
    assert res.effective(R(4, 256), 4) == R(1, 64)
    assert res.effective(R(2, 512), 20_000) == R(1, 256)
    legacy = ClusterResources(default_grid(), R(2, 256), ConstantContention())
    assert legacy.effective(R(4, 256), 4) == R(4, 256)  # as given: no rules


def test_vector_terms_match_the_scalar_ones():
    model = LibraContention(1.0, 1e-4, LibraRate(1e9, 8e8, 0.05), LibraRate(1.1e9, 8e8, 0.05), 2e-5, 1.0)
    res = stock(model=model)
    cost = AlphaBeta(1e-5, 1e-9)
    sizes = np.array([4.0, 5000, 20000, 40000, 70000, 150000, 1 << 20, 25e6])
    for cfg in res.allowed:
        for overlapped in (False, True):
            vec = res.allreduce_s(cost, sizes, cfg, overlapped)
            one = [model.allreduce_s(cost, float(b), res.effective(cfg, b), overlapped) for b in sizes]
            assert np.array_equal(vec, np.array(one))
        cf = res.compute_factor(cfg, sizes)
        assert np.array_equal(cf, np.array([model.compute_factor(res.effective(cfg, b)) for b in sizes]))
    # a tiny all-reduce asked with 4x512 holds 1 x 64 threads: compute beside it slows less
    assert res.compute_factor(R(4, 512), 4) < res.compute_factor(R(4, 512), 25e6) == model.compute_factor(R(4, 512))


def test_stock_nccl_json_round_trips_and_old_files_load_unchanged():
    doc = {
        "library": "nccl",
        "nccl": {"channels": 2, "nthreads": 256, "mechanism": "tuner"},
        "allowed": [R(1, 64).to_json(), R(2, 256).to_json(), R(2, 512).to_json()],
        "contention": {"model": "constant", "compute_slowdown": 0.5},
    }
    res = resources_from_json(doc)
    assert res.default == R(2, 256) and res.nccl == NcclSetting(2, 256, mechanism="tuner")  # the default is NCCL's own
    again = resources_from_json(json.loads(json.dumps(res.to_json())))
    assert again == res and again.to_json() == res.to_json()
    with pytest.raises(CommschedError, match=r"resources.nccl: nccl.nthreads"):
        resources_from_json({**doc, "nccl": {"channels": 2, "nthreads": 300}})
    with pytest.raises(CommschedError, match="needs 'nthreads'"):
        resources_from_json({**doc, "nccl": {"channels": 2}})
    with pytest.raises(CommschedError, match="library must be one of"):
        resources_from_json({**doc, "library": "stock"})
    old = {"default": R(2, 256).to_json(), "contention": {"model": "constant", "compute_slowdown": 0.5}}
    legacy = resources_from_json(old)
    assert legacy.library is None and legacy.nccl is None and "library" not in legacy.to_json()
    with pytest.raises(CommschedError, match="needs the library's default config"):
        resources_from_json({"contention": old["contention"]})
    rs = preset("rs-2xv100s-pcie")
    assert cluster_from_json(json.loads(json.dumps(rs.to_json()))).resources == rs.resources
