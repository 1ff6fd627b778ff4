"""The iteration model fitted from a job's own recorded steps (commsched.calibrate.in_job)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from commsched.calibrate.in_job import Busy, fit_cost, fit_in_job, profile_of_steps, service_times
from commsched.cost.models import Table
from commsched.errors import CommschedError

NAN = float("nan")


@dataclass(frozen=True)
class Rec:
    forward_end_s: float
    ready_s: tuple
    bucket_start_s: tuple
    bucket_end_s: tuple
    bucket_bytes: tuple
    step_end_s: float
    tensor_names: tuple = ("a", "b", "c")


def test_the_profile_orders_tensors_by_ready_time_and_keeps_the_whole_step():
    # c is ready first, then b, then a; the step's period adds 0.2 s after its end (optimizer, data)
    recs = [Rec(1.0, (3.0, 2.0, 1.5), (2.1, 3.1), (2.9, 3.6), (10, 20), 3.7) for _ in range(3)]
    profile, unused = profile_of_steps(recs, [3.9, 3.9, 3.9], {"a": 4, "b": 8, "c": 12}, "m")
    assert unused == ()
    assert [t.name for t in profile.tensors] == ["c", "b", "a"]
    assert [t.bytes for t in profile.tensors] == [12, 8, 4]
    assert profile.forward_s == pytest.approx(1.0)
    assert [t.backward_s for t in profile.tensors] == pytest.approx([0.5, 0.5, 1.0])
    # after the last all-reduce: DDP's copy back (3.7 - 3.6) and the rest of the period (3.9 - 3.7)
    assert profile.optimizer_s == pytest.approx(0.3)


def test_a_tensor_without_gradients_is_named_and_left_out():
    recs = [Rec(1.0, (3.0, NAN, 1.5), (3.1,), (3.6,), (16,), 3.7), Rec(1.0, (3.0, NAN, 1.5), (3.1,), (3.6,), (16,), 3.7)]
    profile, unused = profile_of_steps(recs, [4.0, 4.0], {"a": 4, "b": 8, "c": 12}, "m")
    assert unused == ("b",)
    assert [t.name for t in profile.tensors] == ["c", "a"]


def test_a_tensor_used_in_some_steps_counts_as_ready_at_the_first_gradient_elsewhere():
    recs = [Rec(1.0, (3.0, 2.0, 1.5), (3.1,), (3.6,), (24,), 3.7), Rec(1.0, (3.0, NAN, 1.5), (3.1,), (3.6,), (24,), 3.7)]
    profile, unused = profile_of_steps(recs, [4.0, 4.0], {"a": 4, "b": 8, "c": 12}, "m")
    assert unused == () and [t.name for t in profile.tensors] == ["c", "b", "a"]


def test_errors_name_what_is_wrong():
    rec = Rec(1.0, (3.0, 2.0, 1.5), (3.1,), (3.6,), (24,), 3.7)
    with pytest.raises(CommschedError, match="no recorded steps"):
        profile_of_steps([], [], {}, "m")
    with pytest.raises(CommschedError, match="1 recorded steps but 2"):
        profile_of_steps([rec], [1.0, 2.0], {"a": 4, "b": 8, "c": 12}, "m")
    with pytest.raises(CommschedError, match="no tensor got a gradient"):
        profile_of_steps([Rec(1.0, (NAN, NAN, NAN), (), (), (), 1.0)], [2.0], {"a": 4, "b": 8, "c": 12}, "m")


def test_buckets_in_flight_together_are_one_busy_stretch():
    # backward compute runs from 0.5 (end of forward) to 2.2 (last gradient); the second bucket was
    # launched while the first was in flight, the third alone
    rec = Rec(0.5, (2.2, 1.0, 1.0), (1.0, 1.5, 4.0, 6.0), (2.0, 2.5, 4.5, NAN), (100, 200, 300, 400), 5.0)
    got = service_times([rec])
    assert got == [Busy(2, 300, 1.5, pytest.approx(1.2)), Busy(1, 300, 0.5, 0.0)]


def test_the_slowdown_under_compute_is_recovered_from_buckets_and_probes():
    alpha, beta, m = 2e-3, 4e-9, 0.8
    samples = []
    for b in (4096, 65536, 1 << 20, 8 << 20, 25 << 20):
        solo = alpha + beta * b
        samples.append(Busy(1, b, solo))  # alone (a probe, or a bucket after the backward pass)
        ov = 0.5 * solo  # half of it under compute: it takes m / (1 + m) of that longer
        samples.append(Busy(1, b, solo + ov * m / (1 + m), ov))
        samples.append(Busy(2, 2 * b, 2 * solo))  # two in flight together: the link shared
    cost, kind, err, got_m = fit_cost(samples)
    assert kind == "table" and isinstance(cost, Table) and got_m == pytest.approx(m)
    for b in (4096, 65536, 1 << 20, 8 << 20, 25 << 20):  # the cost alone, the slowdown taken out
        assert cost.time_s(b) == pytest.approx(alpha + beta * b, rel=1e-6)
    assert err < 1e-6


def test_the_cost_is_the_per_call_medians_where_no_line_fits_small_all_reduces():
    # small all-reduces back to back: a wake-up of ~2.5 ms each whatever their size, one chain of
    # 4 KiB stalled; from 1 MiB on bytes over bandwidth (the emulated link, BENCHMARKS.md section 11)
    beta = 4.2e-9
    samples = [Busy(8, 8 * 4096, 8 * t) for t in (2.4e-3, 2.5e-3, 25e-3)]
    samples += [Busy(8, 8 * 65536, 8 * t) for t in (2.6e-3, 2.5e-3, 2.7e-3)]
    samples += [Busy(8, 8 << 20, 8 * beta * (1 << 20) * f) for f in (1.0, 1.02, 0.98)]
    samples += [Busy(1, 20 << 20, beta * (20 << 20) * f) for f in (1.01, 0.99)]
    cost, kind, _, m = fit_cost(samples)
    assert kind == "table" and m == 0.0
    assert cost.time_s(4096) == pytest.approx(2.5e-3)  # the median: the stalled chain does not set it
    assert cost.time_s(65536) == pytest.approx(2.6e-3)
    assert cost.time_s(1 << 20) == pytest.approx(beta * (1 << 20))
    assert cost.time_s(20 << 20) == pytest.approx(beta * (20 << 20))
    # a least-squares line through the same points (what tuning fitted before) charges every call
    # 4.5 ms on top of the bandwidth: 1 MiB buckets 80% dearer than they measure
    a = np.array([[b.calls, b.bytes] for b in samples], dtype=float)
    alpha_ls, beta_ls = np.linalg.lstsq(a, np.array([b.seconds for b in samples]), rcond=None)[0]
    assert alpha_ls + beta_ls * (1 << 20) > 1.7 * cost.time_s(1 << 20)
    assert all(b >= a for a, b in zip(cost.seconds, cost.seconds[1:]))
    with pytest.raises(CommschedError, match="two message sizes"):
        fit_cost([Busy(1, 1000, 1e-3), Busy(1, 1000, 2e-3)])


def test_fit_in_job_pools_buckets_and_probes():
    recs = [Rec(1.0, (3.0, 2.0, 1.5), (2.1, 3.1), (2.9, 3.6), (10 << 20, 20 << 20), 3.7) for _ in range(2)]
    model = fit_in_job(recs, [4.0, 4.0], {"a": 4, "b": 8, "c": 12}, [Busy(8, 8 * 4096, 8e-3)], model="m")
    assert len(model.points) == 5 and model.cost.time_s(20 << 20) > model.cost.time_s(4096) > 0
    doc = model.to_json()
    assert doc["cost_kind"] in ("alpha-beta", "table") and not math.isnan(doc["max_abs_rel_error"])
