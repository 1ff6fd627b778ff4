"""Cost models: MG-WFBP Table II, OSF Eq. 7 and 18, tables, fits and presets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from commsched.cost.cluster import PRESETS, ClusterSpec, preset, ring_link_from_fit
from commsched.cost.fit import fit_alpha_beta, fit_piecewise
from commsched.cost.cost_json import cost_model_from_json
from commsched.cost.models import (
    AlgorithmCost,
    AlphaBeta,
    LinkParams,
    Piecewise,
    Table,
    algorithm_alpha_beta,
    osf_ring_cost,
)
from commsched.errors import CommschedError

LINK = LinkParams(alpha_s=1e-5, beta_s_per_byte=1e-9, gamma_s_per_byte=1e-10)


@pytest.mark.parametrize(
    "algo,a,b",
    [
        ("tree", 2 * 1e-5 * 3, (2e-9 + 1e-10) * 3),
        ("recursive_doubling", 1e-5 * 3, (1e-9 + 1e-10) * 3),
        ("recursive_halving_doubling", 2 * 1e-5 * 3, 2e-9 - (2e-9 + 1e-10) / 8 + 1e-10),
        ("double_binary_tree", 2 * 1e-5 * 3, 1e-9 + 1e-10),
        ("ring", 2 * 7 * 1e-5, 2 * 7 / 8 * 1e-9 + 7 / 8 * 1e-10),
    ],
)
def test_table_ii_at_eight_workers(algo, a, b):
    ab = algorithm_alpha_beta(algo, LINK, 8)
    assert math.isclose(ab.alpha_s, a, rel_tol=1e-12)
    assert math.isclose(ab.beta_s_per_byte, b, rel_tol=1e-12)


def test_one_worker_communicates_nothing():
    for algo in ("ring", "tree", "double_binary_tree"):
        assert algorithm_alpha_beta(algo, LINK, 1).time_s(10**9) == 0.0


def test_ring_startup_grows_linearly_and_trees_logarithmically():
    ring = [algorithm_alpha_beta("ring", LINK, n).alpha_s for n in (4, 8, 16)]
    dbt = [algorithm_alpha_beta("double_binary_tree", LINK, n).alpha_s for n in (4, 8, 16)]
    assert ring[2] / ring[1] > 2 and dbt[2] - dbt[1] == pytest.approx(dbt[1] - dbt[0])


def test_mgwfbp_presets_reproduce_fig4_fits_at_16_workers():
    for name, (a, b) in {"k80-10gbe": (9.72e-4, 1.97e-9), "v100-10gbe": (9.08e-4, 7.4e-10), "v100-56gbib": (2.36e-4, 4.06e-10)}.items():
        ab = preset(name).allreduce.alpha_beta
        assert ab.alpha_s == pytest.approx(a, rel=1e-12) and ab.beta_s_per_byte == pytest.approx(b, rel=1e-12)
        assert "MG-WFBP" in preset(name).source


def test_every_cluster_of_the_shipped_mg_wfbp_table_is_a_preset_citing_it():
    from commsched.cost.cluster import read_paper_table

    rows = read_paper_table("mg-wfbp-clusters.csv")
    names = {"cluster1": "k80-10gbe", "cluster2": "v100-10gbe", "cluster3": "v100-56gbib"}
    assert sorted(r["cluster"] for r in rows) == sorted(names)
    for r in rows:
        spec = preset(names[r["cluster"]])
        assert spec.workers == int(r["gpus"]) and "commsched/cost/data/mg-wfbp-clusters.csv" in spec.source


def test_ring_link_inversion_round_trips():
    link = ring_link_from_fit(1e-3, 1e-9, 16)
    ab = algorithm_alpha_beta("ring", link, 16)
    assert ab.alpha_s == pytest.approx(1e-3) and ab.beta_s_per_byte == pytest.approx(1e-9)


def test_osf_eq7():
    n, bw, delta, pi, s = 32, 3.125e9, 1e-4, 13.45e12, 4
    m = osf_ring_cost(n, bw, delta, pi, s)
    d = 1e8
    expected = 2 * (n - 1) / (bw * n) * d + (n - 1) / (n * pi * s) * d + delta
    assert m.time_s(d) == pytest.approx(expected, rel=1e-12)
    # the OSF preset is Eq. 7 written as ring links, so it rescales with N
    osf = preset("osf-2080ti-25gbe")
    assert osf.workers == 32
    rtt = 45e3 / bw
    for workers in (4, 32, 256):
        eq7 = osf_ring_cost(workers, bw, 2 * (workers - 1) * rtt, 13.45e12, 4)
        assert osf.with_workers(workers).allreduce.time_s(10**7) == pytest.approx(eq7.time_s(10**7), rel=1e-12)


def test_piecewise_eq18_branches_and_monotonicity():
    m = Piecewise(a1_s=1e-5, b1_s=1e-4, a2_s_per_byte=1e-9, b2_s=3e-4, threshold_bytes=45_000)
    assert m.time_s(1024) == pytest.approx(1e-5 * 10 + 1e-4)
    assert m.time_s(45_000) == pytest.approx(1e-9 * 45_000 + 3e-4)
    assert m.times_s(np.array([1024, 45_000])) == pytest.approx([m.time_s(1024), m.time_s(45_000)])
    assert m.nondecreasing
    assert not Piecewise(1e-5, 1e-3, 1e-9, 0.0, 45_000).nondecreasing  # falls at the threshold


def test_table_interpolates_and_extrapolates():
    t = Table((1000, 2000, 4000), (1.0, 2.0, 2.5))
    assert t.time_s(1500) == pytest.approx(1.5)
    assert t.time_s(8000) == pytest.approx(3.5)
    assert t.time_s(500) == pytest.approx(0.5)
    assert t.nondecreasing and not Table((1, 2, 3), (2.0, 1.0, 1.5)).nondecreasing


def test_fit_alpha_beta_recovers_parameters_and_reports_residuals():
    x = np.logspace(2, 8, 25)
    y = 9.08e-4 + 7.4e-10 * x
    rep = fit_alpha_beta(x, y)
    assert rep.model.alpha_s == pytest.approx(9.08e-4, rel=1e-6)
    assert rep.model.beta_s_per_byte == pytest.approx(7.4e-10, rel=1e-6)
    assert len(rep.residuals_s) == 25 and rep.rmse_s < 1e-12
    noisy = fit_alpha_beta(x, y * (1 + 0.05 * np.sin(np.arange(25))))
    assert noisy.max_abs_rel_error > 0.01 and noisy.rmse_s > 0


def test_fit_piecewise_recovers_both_branches():
    truth = Piecewise(2e-6, 5e-5, 8e-10, 1e-4, 45_000)
    x = np.logspace(1, 8, 40)
    rep = fit_piecewise(x, truth.times_s(x), 45_000)
    for k in ("a1_s", "b1_s", "a2_s_per_byte", "b2_s"):
        assert getattr(rep.model, k) == pytest.approx(getattr(truth, k), rel=1e-6, abs=1e-15)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: AlphaBeta(-1e-3, 1e-9),
        lambda: AlphaBeta(1e-3, float("nan")),
        lambda: LinkParams(1e-5, -1.0),
        lambda: algorithm_alpha_beta("butterfly", LINK, 8),
        lambda: algorithm_alpha_beta("ring", LINK, 0),
        lambda: Table((1000, 1000), (1.0, 2.0)),
        lambda: Table((1000,), (1.0,)),
        lambda: fit_alpha_beta([1000, 1000], [1.0, 2.0]),
        lambda: fit_alpha_beta([1000, -5], [1.0, 2.0]),
        lambda: fit_piecewise([10, 20, 30], [1, 2, 3], 25),
        lambda: cost_model_from_json({"model": "magic"}, 8),
        lambda: cost_model_from_json({"model": "alpha_beta", "alpha_s": 1e-3}, 8),
        lambda: preset("nope"),
        lambda: ClusterSpec("c", 0, AlphaBeta(1e-3, 1e-9)),
    ],
)
def test_bad_input_is_a_clear_error(bad):
    with pytest.raises(CommschedError):
        bad()


def test_a_table_that_extrapolates_to_free_all_reduces_is_an_error():
    """Falling last segment: 0 s at 1137 bytes; a first segment so steep it reaches 0 s before 1 byte."""
    with pytest.raises(CommschedError, match="extrapolates to 0 s at about 1137 bytes .* above the table's range"):
        Table((4, 1024), (1e-3, 1e-4))
    with pytest.raises(CommschedError, match="extrapolates to 0 s at about 1.049e\\+06 bytes .* below the table's range"):
        Table((2**20, 2**21), (1e-9, 1e-3))
    with pytest.raises(CommschedError, match="time at 1024 bytes must be > 0"):
        Table((4, 1024), (1e-5, 0.0))
    # rising, and above 0 at 1 byte; falling in the middle is allowed (the exhaustive planner handles it)
    ok = Table((4, 1024, 2048, 4096), (1e-5, 3e-5, 2e-5, 4e-5))
    assert ok.time_s(1) > 0 and ok.time_s(2**50) > 0 and not ok.nondecreasing


@pytest.mark.parametrize(
    "bad, needle",
    [
        (lambda: AlphaBeta(1e308, 1e-9), "alpha_s must be at most 1e\\+06 seconds"),
        (lambda: AlphaBeta(1e-3, 1e300), "beta_s_per_byte must be at most 1 seconds per byte"),
        (lambda: AlphaBeta(10**400, 1e-9), "finite number of seconds, got an integer of about 401 digits"),
        (lambda: LinkParams(1e-5, 1e-9, float("inf")), "gamma_s_per_byte must be a finite number"),
        (lambda: Piecewise(1e-5, 1e-4, 1e-9, 3e-4, 2**50 + 1), "threshold_bytes must be at most 2\\*\\*50"),
        (lambda: Piecewise(1e308, 1e-4, 1e-9, 3e-4, 4096), "a1_s must be at most"),
        (lambda: Table((4, 10**400), (1e-5, 2e-5)), "at most 2\\*\\*50 bytes"),
        (lambda: algorithm_alpha_beta("ring", LinkParams(1.0, 1e-9), 2**20), "ring all-reduce over 1048576 workers .* over the bounds"),
        (lambda: algorithm_alpha_beta("tree", LINK, 2**20 + 1), "at most 2\\*\\*20"),
        (lambda: preset("v100-10gbe").with_workers(10**400), "at most 2\\*\\*20"),
        (lambda: ClusterSpec("c", 2**21, AlphaBeta(1e-3, 1e-9)), "at most 2\\*\\*20"),
        (lambda: cost_model_from_json({"model": "alpha_beta", "alpha_s": 10**400, "beta_s_per_byte": 0}, 8), "'alpha_s' must be a finite number"),
        (lambda: fit_alpha_beta([1, 10**400], [1.0, 2.0]), "samples must be numbers"),
        (lambda: fit_alpha_beta([1, 2**51], [1.0, 2.0]), "at most 2\\*\\*50"),
        (lambda: fit_alpha_beta([1, 2], [1.0, 1e7]), "at most 1e\\+06"),
    ],
)
def test_numbers_beyond_the_bounds_are_errors_naming_them(bad, needle):
    with pytest.raises(CommschedError, match=needle):
        bad()


def test_the_largest_cluster_stays_finite():
    """Every preset at 2**20 workers, every algorithm: T of a 1 PiB message is finite and positive."""
    for c in PRESETS.values():
        if not isinstance(c.allreduce, AlgorithmCost):
            continue
        for algo in ("ring", "tree", "double_binary_tree", "recursive_doubling", "recursive_halving_doubling"):
            t = c.with_algorithm(algo).with_workers(2**20).allreduce.time_s(2**50)
            assert math.isfinite(t) and t > 0, (c.name, algo, t)


def test_fitted_model_cannot_be_rescaled_but_algorithm_models_can():
    fitted = ClusterSpec("fit", 16, AlphaBeta(1e-3, 1e-9))
    with pytest.raises(CommschedError, match="cannot be rescaled"):
        fitted.with_workers(32)
    c = PRESETS["v100-10gbe"].with_workers(64)
    assert isinstance(c.allreduce, AlgorithmCost) and c.workers == 64
    assert c.allreduce.alpha_beta.alpha_s > PRESETS["v100-10gbe"].allreduce.alpha_beta.alpha_s


def test_emulated_cluster_preset_is_the_eq18_fit_of_its_stored_samples():
    import json
    from pathlib import Path

    from commsched.cost.fit import fit_piecewise_auto

    c = preset("emulated-2x2gbit-gloo")
    assert isinstance(c.allreduce, Piecewise) and c.workers == 2 and "bench-comm" in c.source
    doc = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "emulated-2x2gbit-gloo.json").read_text())
    refit = fit_piecewise_auto(doc["samples"]["sizes_bytes"], doc["samples"]["time_s"]).model
    assert refit.threshold_bytes == c.allreduce.threshold_bytes
    for f in ("a1_s", "b1_s", "a2_s_per_byte", "b2_s"):
        assert getattr(refit, f) == pytest.approx(getattr(c.allreduce, f), rel=1e-12), f


def test_nondecreasing_points_pools_dips_and_starts_flat_at_one_byte():
    from commsched.cost.fit import nondecreasing_points

    assert nondecreasing_points([10, 20, 30, 40], [1.0, 3.0, 2.0, 5.0]) == ((1, 10, 20, 30, 40), (1.0, 1.0, 2.5, 2.5, 5.0))
    assert nondecreasing_points([1, 8], [4.0, 2.0]) == ((1, 8), (3.0, 3.0))
