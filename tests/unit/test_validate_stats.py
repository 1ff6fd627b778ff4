"""The statistics of `commsched validate`: contention factors, bootstrap intervals, config checks."""

from __future__ import annotations

import pytest

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.runtime.validate import ProfileSteps, ValidationConfig, contention_of, error_intervals
from commsched.sim.contention import simulate_contended
from commsched.types import ModelProfile, TensorSpec


def test_contention_factors_are_ratios_of_medians_clipped_at_zero():
    # (backward alone, backward under all-reduce, all-reduce alone, all-reduce under backward)
    samples = [(1.0, 1.5, 2.0, 1.0), (1.0, 1.4, 2.0, 1.0), (3.0, 1.6, 2.0, 1.0)]
    c = contention_of(samples)
    assert c["compute_slowdown"] == pytest.approx(0.5) and c["comm_slowdown"] == 0.0 and c["samples"] == 3


def test_bootstrap_interval_takes_as_many_resamples_off_each_end():
    order = ModelProfile("m", 1, "cpu", "measured", 0.1, (TensorSpec("a", 400, 0.0), TensorSpec("b", 400, 0.0)))
    steps = ProfileSteps(order, (0.1,) * 3, ((0.2, 0.3),) * 3, (0.0,) * 3)
    probes = [(1.0, 1.2, 1.0, 1.1)] * 3
    cluster = ClusterSpec("c", 2, AlphaBeta(0.01, 1e-6))
    pred = simulate_contended(steps.profile(), (2,), cluster.allreduce, 0.2, 0.1).iteration_s
    # Two measured steps: a resampled median is a, b or their mean, so the error spans exactly
    # [pred/b - 1, pred/a - 1], and with 200 resamples both ends occur more than 5 times each.
    a, b = 0.3, 0.5
    lo, hi = error_intervals(steps, probes, {"s": (2,)}, cluster, {"s": [a, b]}, resamples=200)["s"]
    assert lo == pytest.approx(pred / b - 1) and hi == pytest.approx(pred / a - 1)
    # nothing to resample: the interval is the point
    lo, hi = error_intervals(steps, probes, {"s": (2,)}, cluster, {"s": [a, a]}, resamples=50)["s"]
    assert lo == hi == pytest.approx(pred / a - 1)


@pytest.mark.parametrize("field", ["rounds", "steps", "resamples", "contention_iters"])
def test_config_rejects_non_positive_counts(field):
    with pytest.raises(CommschedError, match=field):
        ValidationConfig("resnet18", 4, **{field: 0})
