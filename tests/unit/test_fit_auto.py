"""fit_piecewise_auto: OSF Eq. 18 with the threshold picked from the samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from commsched.cost.fit import fit_piecewise, fit_piecewise_auto
from commsched.cost.models import Piecewise
from commsched.errors import CommschedError

TRUE = Piecewise(a1_s=2e-6, b1_s=1e-5, a2_s_per_byte=1e-9, b2_s=5e-5, threshold_bytes=65_536)
SIZES = [2**k for k in range(2, 25)]  # 4 B .. 16 MiB, the threshold is one of them


def _times(model: Piecewise, sizes: list[int]) -> list[float]:
    return [model.time_s(s) for s in sizes]


def test_recovers_threshold_and_parameters_from_noiseless_samples():
    report = fit_piecewise_auto(SIZES, _times(TRUE, SIZES))
    m = report.model
    assert isinstance(m, Piecewise)
    assert m.threshold_bytes == TRUE.threshold_bytes
    for field in ("a1_s", "b1_s", "a2_s_per_byte", "b2_s"):
        assert math.isclose(getattr(m, field), getattr(TRUE, field), rel_tol=1e-6, abs_tol=1e-15), field
    assert report.rmse_s < 1e-12
    assert report.max_abs_rel_error < 1e-6


def test_threshold_between_samples_is_reported_as_the_first_size_above_it():
    # A true threshold of 50,000 B splits powers of two exactly as 65,536 does.
    true = Piecewise(2e-6, 1e-5, 1e-9, 5e-5, 50_000)
    report = fit_piecewise_auto(SIZES, _times(true, SIZES))
    assert report.model.threshold_bytes == 65_536
    assert report.rmse_s < 1e-12


def test_result_is_the_best_of_all_fixed_thresholds():
    rng = np.random.default_rng(0)
    times = np.array(_times(TRUE, SIZES)) * rng.uniform(0.95, 1.05, len(SIZES))
    auto = fit_piecewise_auto(SIZES, times)
    sse = lambda r: float(np.sum(np.square(r.residuals_s)))  # noqa: E731
    others = [fit_piecewise(SIZES, times, t) for t in SIZES[2:-1]]
    assert sse(auto) == min(sse(r) for r in others)


def test_explicit_candidates_limit_the_search():
    report = fit_piecewise_auto(SIZES, _times(TRUE, SIZES), candidates=[1024, 1 << 20])
    assert report.model.threshold_bytes in (1024, 1 << 20)
    assert report.rmse_s > 0  # neither is the true threshold


def test_repeated_sizes_count_once_when_placing_candidates():
    sizes = [4, 4, 16, 16, 64, 256]
    report = fit_piecewise_auto(sizes, [1e-5, 1.1e-5, 2e-5, 2.1e-5, 3e-5, 4e-5])
    assert report.model.threshold_bytes == 64  # the only size with two distinct sizes on each side


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_too_few_distinct_sizes_is_an_error(n):
    sizes = SIZES[:n]
    with pytest.raises(CommschedError, match="four or more distinct sizes"):
        fit_piecewise_auto(sizes, _times(TRUE, sizes))


def test_three_distinct_sizes_repeated_are_still_too_few():
    with pytest.raises(CommschedError, match="got 3"):
        fit_piecewise_auto([4, 4, 16, 16, 64, 64], [1e-5] * 6)


@pytest.mark.parametrize("bad", [8, 1 << 24, 0, -5, 2.5, True])
def test_bad_candidate_is_named(bad):
    with pytest.raises(CommschedError, match=str(bad) if not isinstance(bad, bool) else "True"):
        fit_piecewise_auto(SIZES, _times(TRUE, SIZES), candidates=[bad])


def test_empty_candidates_is_an_error():
    with pytest.raises(CommschedError, match="no piecewise threshold candidates"):
        fit_piecewise_auto(SIZES, _times(TRUE, SIZES), candidates=[])
