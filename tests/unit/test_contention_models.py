"""Resource configs, the three contention models, their JSON, their fits, and the rs-2xv100s-pcie preset."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from commsched.cost.cluster import RS_BETA_S_PER_BYTE, RS_STARTUP_S, cluster_from_json, preset, rs_grid_samples
from commsched.cost.resource_models import (
    ClusterResources,
    ConstantContention,
    GridContention,
    GridEntry,
    LibraContention,
    LibraRate,
    ResourceConfig,
    config_from_json,
    contention_from_json,
    default_grid,
    fit_libra_comm,
    fit_libra_compute,
    grid_from_samples,
    resources_from_json,
    ring_terms,
)
from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError

R = ResourceConfig


def test_config_basics_and_errors():
    c = R(2, 256)
    assert c.threads == 512 and c.short == "2x256" and config_from_json(c.to_json()) == c
    for bad in ({"blocks": 0, "threads_per_block": 64}, {"blocks": 1, "threads_per_block": 4096}, {"blocks": 1}, {"blocks": True, "threads_per_block": 64}, [1, 64]):
        with pytest.raises(CommschedError):
            config_from_json(bad)
    assert len(default_grid()) == 16 and R(4, 512) in default_grid()


def test_a_config_outside_the_clusters_set_is_an_error_naming_it():
    res = ClusterResources((R(1, 64), R(2, 256)), R(2, 256), ConstantContention(0.5, 0.1))
    assert res.config_of(None) == R(2, 256)
    with pytest.raises(CommschedError, match="3x128 is not allowed"):
        res.config_of({"blocks": 3, "threads_per_block": 128})
    with pytest.raises(CommschedError, match="default config 4x64"):
        ClusterResources((R(1, 64),), R(4, 64), ConstantContention())


def test_constant_model_is_the_two_factors():
    m = ConstantContention(0.5, 0.25)
    cost = AlphaBeta(1e-3, 1e-9)
    assert m.compute_factor(R(1, 64)) == 1.5 == m.compute_factor(R(4, 512))
    assert m.allreduce_s(cost, 10**6, R(1, 64), False) == pytest.approx(cost.time_s(10**6))
    assert m.allreduce_s(cost, 10**6, R(1, 64), True) == pytest.approx(1.25 * cost.time_s(10**6))


def test_libra_model_follows_eq_3_to_6():
    a, chat = ring_terms(8, 5e-6)
    assert a == pytest.approx(70e-6) and chat == pytest.approx(14 / 8)  # Eq. 4
    m = LibraContention(1.0, 1e-4, LibraRate(1e9, 5e8, 0.05), LibraRate(1.2e9, 6e8, 0.05), a, chat)
    r = R(2, 256)
    assert m.compute_factor(r) == pytest.approx(1 / (1.0 - 1e-4 * 512))  # Eq. 5
    x = 1e9 - 5e8 * math.exp(-0.05 * 512**0.6)  # Eq. 6
    assert m.allreduce_s(None, 10**7, r, True) == pytest.approx(a + chat * 1e7 / x)
    np.testing.assert_allclose(m.allreduce_s(None, np.array([1e6, 1e7]), r, True), a + chat * np.array([1e6, 1e7]) / x)
    with pytest.raises(CommschedError, match="4x512"):
        LibraContention(1.0, 1e-3, LibraRate(1e9, 0, 1), LibraRate(1e9, 0, 1), 0.0, 1.0).compute_factor(R(4, 512))


def test_grid_interpolates_in_message_size():
    e = GridEntry(((1 << 20, 2.0), (1 << 24, 1.0)), 1.5)
    assert e.relative(1 << 10) == 2.0 and e.relative(1 << 30) == 1.0
    assert e.relative(1 << 22) == pytest.approx(1.5)  # halfway in log2
    g = GridContention(((R(1, 64), e),))
    cost = AlphaBeta(0.0, 1e-9)
    assert g.allreduce_s(cost, 1 << 22, R(1, 64), False) == pytest.approx(1.5 * (1 << 22) * 1e-9)
    with pytest.raises(CommschedError, match="no entry for config 2x64"):
        g.compute_factor(R(2, 64))


@pytest.mark.parametrize(
    "model",
    [
        ConstantContention(0.3, 0.1),
        LibraContention(1.0, 1e-4, LibraRate(1e9, 5e8, 0.05), LibraRate(1.2e9, 6e8, 0.05), 1e-5, 1.0),
        GridContention(((R(1, 64), GridEntry(((1000, 1.2), (10**6, 0.9)), 1.1, 1.05)), (R(2, 256), GridEntry(((10**6, 1.0),), 2.3)))),
    ],
)
def test_models_round_trip_through_json(model):
    doc = json.loads(json.dumps(model.to_json()))
    assert contention_from_json(doc) == model


def test_bad_contention_documents_are_one_line_errors():
    for bad in (None, {"model": "magic"}, {"model": "constant", "compute_slowdown": -1}, {"model": "constant", "x": 1},
                {"model": "grid", "configs": [{"blocks": 1, "threads_per_block": 64, "relative_time": [], "compute_factor": 1}]},
                {"model": "grid", "configs": [{"blocks": 1, "threads_per_block": 64, "relative_time": [[10, 1e400]], "compute_factor": 1}]},
                {"model": "libra", "a1": 1, "a2": 0, "overlapped": {"gamma1": 1}, "alone": {}, "startup_s": 0, "chat_per_byte": 1}):
        with pytest.raises(CommschedError) as e:
            contention_from_json(bad)
        assert "\n" not in str(e.value)


def test_cluster_resources_default_to_the_papers_grid():
    doc = {"default": {"blocks": 2, "threads_per_block": 256}, "contention": {"model": "constant", "compute_slowdown": 0.5}}
    res = resources_from_json(doc)
    assert set(res.allowed) == set(default_grid()) and res.default == R(2, 256)
    with pytest.raises(CommschedError, match="default"):
        resources_from_json({"contention": {"model": "constant"}})


def test_fit_libra_compute_recovers_eq5_and_reports_residuals():
    r = np.array([64, 128, 256, 512, 1024, 2048], dtype=float)
    s = 1 / (0.95 - 2e-4 * r)
    fit = fit_libra_compute(r, s)
    assert fit.params["a1"] == pytest.approx(0.95, rel=1e-6) and fit.params["a2"] == pytest.approx(2e-4, rel=1e-5)
    assert fit.max_abs_rel_error < 1e-6 and len(fit.residuals) == 6
    noisy = fit_libra_compute(r, s * np.array([1.05, 0.97, 1.02, 0.99, 1.03, 0.96]))
    assert 0.005 < noisy.max_abs_rel_error < 0.1  # the residuals say how far the samples are
    with pytest.raises(CommschedError, match="two or more thread counts"):
        fit_libra_compute([64, 64], [1.1, 1.2])


def test_fit_libra_comm_recovers_eq6():
    a, chat = ring_terms(2, 1e-5)
    g = (2e9, 1.5e9, 0.08)
    c = np.repeat([1e6, 1e7, 5e7], 6)
    r = np.tile([64, 128, 256, 512, 1024, 2048], 3).astype(float)
    t = a + chat * c / (g[0] - g[1] * np.exp(-g[2] * r**0.6))
    fit = fit_libra_comm(c, r, t, a, chat)
    assert fit.max_abs_rel_error < 1e-4
    assert fit.params["gamma1"] == pytest.approx(g[0], rel=1e-3) and fit.params["gamma4"] == 0.6


def test_grid_from_samples_geometric_means_and_residuals():
    d = R(2, 256)
    grid, fit = grid_from_samples([(d, 1000, 1.0), (R(1, 64), 1000, 1.2)], [(d, 2.0), (d, 8.0), (R(1, 64), 1.1)], d)
    assert grid.compute_factor(d) == pytest.approx(4.0) and grid.compute_factor(R(1, 64)) == pytest.approx(1.1)
    assert fit.max_abs_rel_error == pytest.approx(1.0)  # 2.0 against 4.0
    with pytest.raises(CommschedError, match="not both"):
        grid_from_samples([(d, 1000, 1.0)], [(d, 2.0), (R(1, 64), 1.1)], d)


def test_rs_preset_is_figures_2_and_3():
    c = preset("rs-2xv100s-pcie")
    res = c.resources
    assert res is not None and res.default == R(2, 256) and set(res.allowed) == set(default_grid())
    assert c.device == "V100S" and c.workers == 2
    # Figure 2 as measured: 1x256 takes 0.82 of the default's time, 4x512 1.63
    for cfg, rel in ((R(1, 256), 0.82), (R(4, 512), 1.63), (R(2, 256), 1.0)):
        assert res.contention.allreduce_s(c.allreduce, 25 * 10**6, cfg, False) == pytest.approx(rel * c.allreduce.time_s(25 * 10**6))
    # Figure 3, conv2d/batch_norm/relu at 1x64: 1.08, 1.10, 1.01
    assert res.contention.compute_factor(R(1, 64)) == pytest.approx((1.08 * 1.10 * 1.01) ** (1 / 3))
    assert c.allreduce.time_s(0) == pytest.approx(RS_STARTUP_S) and c.allreduce.time_s(10**6) == pytest.approx(RS_STARTUP_S + 1e6 * RS_BETA_S_PER_BYTE)
    # Figure 5c: ResNet-18's 46,758,048 bytes in 3 buckets at 1x64 take 39 ms
    assert 1.23 * (3 * RS_STARTUP_S + 46_758_048 * RS_BETA_S_PER_BYTE) == pytest.approx(39e-3)
    allreduce, compute = rs_grid_samples()
    assert len(allreduce) == 16 and len(compute) == 48
    assert cluster_from_json(json.loads(json.dumps(c.to_json()))) == c
