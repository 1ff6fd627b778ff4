"""The statistics of `commsched validate` (:mod:`commsched.calibrate`, pure: no torch): contention factors,
launch costs, bootstrap intervals, paired errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.calibrate import (
    MID_PASS_BUCKETS,
    STALL_MIN_CLEAN,
    ProfileSteps,
    contention_of,
    error_intervals,
    launch_costs,
    measured_semantics,
    mid_pass_planner,
    pass_ends,
    semantics_of,
    unstalled,
)
from commsched.sim.events import simulate_contended, simulate_run
from commsched.sim.semantics import CALL_FLOOR, Semantics
from commsched.types import ModelProfile, TensorSpec


def probe(alone=1.0, under=1.5, overlap=1.0, chain=(0.002, 0.0024), pair=(0.01, 0.02), two=None):
    doc = {
        "backward_s": alone, "backward_under_allreduce_s": under, "overlap_s": overlap,
        "chain_16384": chain, "pair_16384": pair,
    }
    if two is not None:
        doc.update(two)
    return doc


def test_contention_factors_from_probe_medians():
    # medians: alone 1.0, under 1.5, overlap 1.0 (the all-reduce ended 0.5 s before the backward
    # pass): 0.5 s at full speed, so 0.5 s of work in the 1.0 s overlapped: rate 1/2, c = 1
    samples = [probe(1.0, 1.5, 1.0), probe(1.0, 1.4, 1.0), probe(3.0, 1.6, 0.5)]
    c = contention_of(samples)
    assert c["compute_slowdown"] == pytest.approx(1.0) and c["samples"] == 3
    # the per-size factor under compute: the ratio of medians per probe size
    assert c["under_compute"] == [[16384, pytest.approx(1.2)]]
    # two at once taking twice as long as one: no gain
    assert c["concurrency_gain_measured"] == pytest.approx(0.0) and c["concurrency_gain"] == 0.0
    assert c["compute_slowdown_concurrent"] is None


def _simulated_probe(c: float, c2: float, allreduce_s: float, second_s: float, work_s: float = 1.0) -> dict:
    """The probe's numbers as the simulator produces them: a backward pass of ``work_s`` with one
    all-reduce of ``allreduce_s`` launched at its start, and with two (the second ``second_s``)."""
    from commsched.sim.events import simulate_run
    from commsched.sim.semantics import Semantics

    # a zero-work tensor carries the message (bytes = seconds x 1e6 at 1 us per byte), then the work
    def run(messages_s: list[float]):
        tensors = [TensorSpec(f"m{k}", int(s * 1e6), 0.0) for k, s in enumerate(messages_s)]
        prof = ModelProfile("p", 1, "cpu", "measured", 0.0, (*tensors, TensorSpec("w", 4, work_s)))
        sem = Semantics("gloo", 2, 0.0, c, 0.0, 0.0, c2)
        tl = simulate_run(prof, tuple(range(1, len(tensors) + 2)), AlphaBeta(0.0, 1e-6), sem)
        ends = sorted(s.end_s for s in tl.allreduces[: len(messages_s)])
        return tl.compute_s, ends

    under, (end,) = run([allreduce_s])
    under2, ends = run([allreduce_s, second_s])
    return {
        "backward_s": work_s, "backward_under_allreduce_s": under, "overlap_s": min(end, under),
        "backward_under_two_s": under2, "overlap_two_s": min(ends[0], under2), "overlap_any_s": min(ends[-1], under2),
        "chain_16384": (0.002, 0.002), "pair_16384": (0.01, 0.02),
    }


@pytest.mark.parametrize(
    "c, c2, allreduce_s, second_s",
    [(0.9, 0.9, 5.0, 5.0), (0.5, 1.5, 1.0, 0.6), (2.0, 3.0, 0.7, 0.3), (0.1, 0.2, 0.05, 0.02)],
)
def test_contention_estimates_are_the_simulators_rates(c, c2, allreduce_s, second_s):
    """The estimator inverts the simulator: probes simulated with compute at 1 / (1 + c) under one
    all-reduce and 1 / (1 + c2) under two (the all-reduces outlasting the backward pass or ending
    first) give back c and c2."""
    sample = _simulated_probe(c, c2, allreduce_s, second_s)
    est = contention_of([sample] * 3, threads=2)
    assert est["compute_slowdown"] == pytest.approx(c) and est["compute_slowdown_concurrent_measured"] == pytest.approx(c2)


def test_compute_slowdown_under_two_all_reduces_separates_the_time_only_one_was_in_flight():
    # alone 1, c1 = 1 (1.5 under one: 0.5 s at full speed, 0.5 s of work in 1 s). Under two: 2.0 s,
    # both in flight 0.5 s, only one 0.5 s (0.25 s of work), none 1 s (1 s of work): the 0.5 s with
    # both did no work at all, which reads as the largest slowdown
    from commsched.calibrate import MAX_COMPUTE_SLOWDOWN

    two = {"backward_under_two_s": 2.0, "overlap_two_s": 0.5, "overlap_any_s": 1.0}
    c = contention_of([probe(two=two)] * 3, threads=2)
    assert c["compute_slowdown"] == pytest.approx(1.0) and c["compute_slowdown_concurrent"] == pytest.approx(MAX_COMPUTE_SLOWDOWN)
    # under two 1.7 s instead: 0.7 s without, 0.25 s with one, so 0.05 s of work in the 0.5 s with both
    two = {"backward_under_two_s": 1.7, "overlap_two_s": 0.5, "overlap_any_s": 1.0}
    c = contention_of([probe(two=two)] * 3, threads=2)
    assert c["compute_slowdown_concurrent"] == pytest.approx(0.5 / 0.05 - 1)


def test_a_gain_is_used_only_when_its_interval_excludes_zero():
    gaining = [probe(pair=(0.01, 0.01 + 0.0001 * k)) for k in range(6)]  # two together about as fast as one
    c = contention_of(gaining, resamples=100, threads=2)
    assert c["concurrency_gain_ci95"][0] > 0 and c["concurrency_gain"] == pytest.approx(c["concurrency_gain_measured"])
    noisy = [probe(pair=(0.01, t)) for t in (0.015, 0.025, 0.02, 0.03, 0.012, 0.04)]
    c = contention_of(noisy, resamples=100, threads=2)
    assert c["concurrency_gain_ci95"][0] <= 0 and c["concurrency_gain"] == 0.0
    assert contention_of(gaining, resamples=100, threads=1)["concurrency_gain"] == 0.0  # NCCL: nothing runs at once


def test_bootstrap_interval_takes_as_many_resamples_off_each_end():
    order = ModelProfile("m", 1, "cpu", "measured", 0.1, (TensorSpec("a", 400, 0.0), TensorSpec("b", 400, 0.0)))
    steps = ProfileSteps(order, (0.1,) * 3, ((0.2, 0.3),) * 3, (0.0,) * 3)
    probes = [probe(1.0, 1.2, 1.0, (0.01, 0.011))] * 3
    cluster = ClusterSpec("c", 2, AlphaBeta(0.01, 1e-6))
    pred = simulate_contended(steps.profile(), (2,), cluster.allreduce, 0.2, 0.1).iteration_s
    # Two measured steps: a resampled median is a, b or their mean, so the error spans exactly
    # [pred/b - 1, pred/a - 1], and with 200 resamples both ends occur more than 5 times each.
    a, b = 0.3, 0.5
    lo, hi = error_intervals(steps, probes, {"s": (2,)}, cluster, {"s": [a, b]}, resamples=200, backend="gloo", threads=1)["s"]
    assert lo == pytest.approx(pred / b - 1) and hi == pytest.approx(pred / a - 1)
    # nothing to resample: the interval is the point
    lo, hi = error_intervals(steps, probes, {"s": (2,)}, cluster, {"s": [a, a]}, resamples=50, backend="gloo", threads=1)["s"]
    assert lo == hi == pytest.approx(pred / a - 1)


def test_table_cost_is_non_decreasing_and_flat_below_the_smallest_size():
    import types

    from commsched.calibrate import table_cost

    # what table_cost reads of bench_chains' CommSamples
    s = types.SimpleNamespace(sizes_bytes=(4, 8, 16, 32), time_s=(3e-3, 1e-3, 2e-3, 5e-3))
    t = table_cost(s)
    assert t.bytes == (1, 4, 8, 16, 32)
    assert t.seconds == (2e-3, 2e-3, 2e-3, 2e-3, 5e-3)  # the dip at 8 B pooled with 4 B: (3 + 1) / 2
    assert t.time_s(1) == t.time_s(2) == 2e-3


def test_semantics_carry_the_per_size_factors_and_the_decisions():
    from commsched.calibrate import semantics_of

    samples = [probe(chain=(0.002, 0.0015)), probe(chain=(0.002, 0.0014)), probe(chain=(0.002, 0.0016))]
    samples = [{**s, "chain_1048576": (0.004, 0.0048)} for s in samples]
    sem = semantics_of(contention_of(samples, threads=2), "gloo")
    assert sem.threads == 2 and sem.comm_slowdown == 0.0 and sem.call_overhead_s == 0.0
    assert sem.under_compute == ((16384, pytest.approx(0.75)), (1048576, pytest.approx(1.2)))


def test_bootstrap_keeps_the_point_estimates_decisions():
    """A gain the full sample rejects (its interval holds 0) is not used in any resample either, so
    the error's interval is an interval of the estimator that made the prediction."""
    order = ModelProfile("m", 1, "cpu", "measured", 0.1, (TensorSpec("a", 400, 0.01), TensorSpec("b", 400, 0.01)))
    steps = ProfileSteps(order, (0.1,) * 3, ((0.11, 0.12),) * 3, (0.0,) * 3)
    noisy = [probe(pair=(0.01, t)) for t in (0.012, 0.025, 0.02, 0.03, 0.011, 0.04)]  # gain anywhere in [-0.6, +0.8]
    decided = contention_of(noisy, 200, threads=2)
    assert decided["concurrency_gain"] == 0.0
    cluster = ClusterSpec("c", 2, AlphaBeta(0.05, 1e-6))
    ends = {"wfbp": (1, 2)}
    lo, hi = error_intervals(steps, noisy, ends, cluster, {"wfbp": [0.3, 0.3]}, resamples=200, backend="gloo", threads=2)["wfbp"]
    point = contention_of(noisy, 0, threads=2, decided=decided)
    assert point["concurrency_gain"] == 0.0 and lo == pytest.approx(hi)  # no resample brought a gain in


def test_paired_speedup_takes_out_drift_between_rounds():
    from commsched.calibrate import paired_speedup

    # the machine halves its speed every other round; the variant is 10% faster in every round
    stock = [1.0, 1.0, 2.0, 2.0] * 5
    variant = [t / 1.1 for t in stock]
    r = paired_speedup(stock, variant, steps=2, resamples=100)
    assert r["speedup_vs_stock_ddp"] == pytest.approx(1.1) and r["speedup_ci95"] == pytest.approx([1.1, 1.1])
    # the same run against itself: exactly 1
    assert paired_speedup(stock, stock, 2, 50)["speedup_vs_stock_ddp"] == 1.0


def test_the_table_drifts_with_the_anchors_measured_in_the_rounds():
    from commsched.cost.models import Table
    from commsched.calibrate import anchors_of, drifted

    table = Table((1, 1024, 1 << 20, 1 << 24), (0.004, 0.004, 0.008, 0.1))
    samples = [{"anchor_1024": 0.002, "anchor_16777216": 0.1}, {"anchor_1024": 0.002, "anchor_16777216": 0.1}]
    t = drifted(table, anchors_of(samples))
    assert t.time_s(1) == pytest.approx(0.002) and t.time_s(1024) == pytest.approx(0.002)  # halved, flat below
    assert t.time_s(1 << 24) == pytest.approx(0.1)  # unchanged at the other anchor
    assert t.time_s(1 << 20) == pytest.approx(0.008 * (0.5 + 0.5 * (20 - 10) / (24 - 10)))  # log-interpolated
    assert drifted(table, {}) is table


def test_a_drift_that_differs_between_anchors_leaves_the_table_non_decreasing():
    """resnet18 under make test: the 46.7 MB anchor drifted less than the 8 MiB one, so 32 MiB,
    scaled between them, came out slower than 46.7 MB and the table "extrapolated to 0 s" (an error
    that ended validate); the scaled points are pooled as table_cost pools the measured ones."""
    from commsched.cost.models import Table
    from commsched.calibrate import drifted

    big = 46_758_048
    table = Table((1, 8 << 20, 32 << 20, big), (0.001, 0.006, 0.0235, 0.0240))
    t = drifted(table, {8 << 20: 0.009, big: 0.0233})  # 1.5x at 8 MiB, 0.97x at 46.7 MB
    assert t.nondecreasing and t.time_s(big) >= t.time_s(32 << 20) > t.time_s(8 << 20)
    assert t.time_s(1 << 40) >= t.time_s(big)  # extrapolates up, or flat, never to 0
    assert t.time_s(8 << 20) == pytest.approx(0.009)


def test_compute_time_per_call_is_what_the_rate_does_not_explain():
    # c = 1 (see above); a chain of 10 calls of 2 ms in flight 20 ms of a 1.2 s backward pass: the
    # rate explains 10 ms of the 200 ms it lost, the other 190 ms are 19 ms per call
    samples = [{**probe(1.0, 1.5, 1.0), "chain_16384": (0.002, 0.002, 1.2, 10)}] * 3
    c = contention_of(samples)
    assert c["compute_slowdown"] == pytest.approx(1.0)
    assert c["compute_per_call_s"] == {"16384": pytest.approx(0.019)}
    assert c["under_compute"] == [[16384, pytest.approx(1.0)]]
    assert contention_of([probe()] * 3)["compute_per_call_s"] is None  # probes that did not keep it


def launch_pass_of(profile, cost, sem, e, ratios=(), finalize_s=0.0, ends=None):
    """What LaunchSteps measures, made by the simulator with a known e and launch ratios ((bytes,
    ratio) points, or one ratio for every size); one bucket per gradient unless ``ends``."""
    ends = ends or tuple(range(1, len(profile.tensors) + 1))
    points = ratios if isinstance(ratios, tuple) else ((1, ratios),)
    tl = simulate_run(profile, ends, cost, replace(sem, launch_compute_s=e, launch_factor_points=points))
    return (tl.compute_s - profile.forward_s, tl.iteration_s - profile.optimizer_s - profile.forward_s + finalize_s, len(ends) - 1)


@pytest.mark.parametrize(
    ("e", "ratio", "factor"),
    [(0.0, 1.0, 0.6), (2e-4, 1.0, 0.6), (0.0, 1.2, 0.6), (1e-4, 1.1, 0.6), (4e-4, 1.5, 0.6), (0.0, 0.8, 1.0), (1e-4, 0.75, 1.0)],
)
def test_launch_costs_recover_the_e_and_ratio_that_made_the_pass(e, ratio, factor):
    # 40 tensors of 16 KiB, 1 ms of backward each; all-reduce 3 ms alone, x0.6 (or x1) under compute, on
    # gloo's two threads with compute at 1 / 1.7 beside them, so they queue (as one bucket per
    # gradient does on the emulated cluster; where all-reduces keep up with compute, the ratio and
    # e both only slow compute and cannot be told apart): the simulator makes the pass with a known
    # e and ratio, and the fit finds them again (a ratio below 1: still slower per call than
    # compute per gradient)
    prof = ModelProfile("m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", 16384, 0.001) for i in range(40)), optimizer_s=0.01)
    cost = AlphaBeta(3e-3, 0.0)
    sem = Semantics("gloo", 2, 0.0, 0.7, 0.0, 0.0, None, ((16384, factor),))
    samples = [{"launch_pass": launch_pass_of(prof, cost, sem, e, ratio, finalize_s=0.004)}] * 3
    got_e, points = launch_costs(samples, sem, prof, cost, 0.004)
    assert got_e == pytest.approx(e, abs=1e-6) and points == ((16384, pytest.approx(ratio, abs=1e-4)),)
    # measured with the semantics they are fitted to: made again, the pass ends where it did
    again = launch_pass_of(prof, cost, sem, got_e, points, finalize_s=0.004)
    assert again[0] == pytest.approx(samples[0]["launch_pass"][0], rel=1e-3) and again[1] == pytest.approx(samples[0]["launch_pass"][1], rel=1e-3)


def test_launch_costs_e_is_never_negative_the_ratio_no_lower_than_its_floor_and_none_without_the_pass():
    prof = ModelProfile("m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", 16384, 0.002) for i in range(10)))
    cost = AlphaBeta(1.5e-3, 0.0)
    sem = Semantics("gloo", 2, 0.0, 0.7, 0.0, 0.0, None, ((16384, 0.6),))
    fast = launch_pass_of(prof, cost, sem, 0.0)
    # compute faster than the simulator with e = 0: e stays 0, not a negative cost
    e, _ = launch_costs([{"launch_pass": (fast[0] * 0.8, fast[1], 9)}], sem, prof, cost, 0.0)
    assert e == 0.0
    # a pass whose end no ratio can reach (it ended before its last gradient was ready): the ratio
    # stops at its floor (e then makes up for the compute the faster all-reduces gave back)
    e, points = launch_costs([{"launch_pass": (fast[0], fast[0] * 0.5, 9)}], sem, prof, cost, 0.0)
    assert e >= 0.0 and points == ((16384, CALL_FLOOR),)
    # one that no ratio up to 64 reaches: 64
    _, points = launch_costs([{"launch_pass": (fast[0], fast[1] * 100, 9)}], sem, prof, cost, 0.0)
    assert points == ((16384, 64.0),)
    assert launch_costs([{"backward_s": 1.0}], sem, prof, cost, 0.0) == (0.0, ())  # probes from before it was measured


def two_size_passes():
    """64 tensors of 16 KiB then 64 KiB alternately, 1 ms of backward each; all-reduce 3 ms + 50 ns/B
    alone, x1 under compute, gloo's two threads, compute at 1 / 1.7 beside them; and the mid pass's
    bucket ends: (profile, cost, semantics, mid ends)."""
    prof = ModelProfile(
        "m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", 16384 if i % 2 else 65536, 0.001) for i in range(64)), optimizer_s=0.01
    )
    sem = Semantics("gloo", 2, 0.0, 0.7, 0.0, 0.0, None, ((16384, 1.0),))
    return prof, AlphaBeta(3e-3, 5e-8), sem, pass_ends(mid_pass_planner(prof), prof)


@pytest.mark.parametrize(("e", "r1", "r2"), [(0.0, 0.7, 1.0), (1e-4, 0.6, 1.3), (2e-4, 1.2, 0.8), (0.0, 1.0, 1.0)])
def test_launch_costs_recover_the_ratio_by_size_from_the_two_passes(e, r1, r2):
    # 64 tensors of 16 KiB then 64 KiB alternately, 1 ms of backward each; all-reduce 3 ms + 50 ns/B
    # alone, x1 under compute, gloo's two threads, compute at 1 / 1.7 beside them, so the buckets of
    # both passes queue (where they keep up with compute, the ratio and e cannot be told apart). The
    # first pass (a bucket per gradient, median 16 KiB) and the mid pass (16 buckets of 160 KiB)
    # made by the simulator with ratio 16 KiB -> r1, 160 KiB -> r2: the fit finds e, r1 and r2 again
    prof, cost, sem, mid = two_size_passes()
    assert len(mid) == MID_PASS_BUCKETS
    points = ((16384, r1), (163840, r2))
    samples = [{"launch_pass": launch_pass_of(prof, cost, sem, e, points), "launch_pass_mid": launch_pass_of(prof, cost, sem, e, points, ends=mid)}] * 3
    got_e, got = launch_costs(samples, sem, prof, cost, 0.0)
    assert [b for b, _ in got] == [16384, 163840]
    assert got_e == pytest.approx(e, abs=2e-6) and [r for _, r in got] == [pytest.approx(r1, abs=1e-4), pytest.approx(r2, abs=1e-4)]
    # a mid pass whose buckets are no bigger (a model of one size of tensor): one ratio, from the first pass
    one_size = replace(prof, tensors=tuple(TensorSpec(f"u{i}", 16384, 0.001) for i in range(8)))
    same_ends = pass_ends(mid_pass_planner(one_size), one_size)
    assert same_ends == tuple(range(1, 9))  # caps below one tensor: a bucket per gradient again
    same = [{"launch_pass": launch_pass_of(one_size, cost, sem, e, r1), "launch_pass_mid": launch_pass_of(one_size, cost, sem, e, r1, ends=same_ends)}]
    got_e, got = launch_costs(same, sem, one_size, cost, 0.0)
    assert got == ((16384, pytest.approx(r1, abs=1e-4)),)


def test_a_pass_faster_than_any_ratio_leaves_its_point_at_the_floor_and_the_other_fitted():
    # the two passes of the test above, the first ending sooner than any ratio under compute can
    # make it (its all-reduces drained faster after compute than the table says, as stock DDP's
    # buckets of one gradient each did at 500 Mbit/s): r1 stops at the floor, and the mid pass,
    # made with ratio 1, is still met (its own buckets take some of r1 between the points)
    prof, cost, sem, mid = two_size_passes()
    first = launch_pass_of(prof, cost, sem, 0.0)
    samples = [{"launch_pass": (first[0], first[1] * 0.7, first[2]), "launch_pass_mid": launch_pass_of(prof, cost, sem, 0.0, ends=mid)}]
    got_e, got = launch_costs(samples, sem, prof, cost, 0.0)
    assert got[0] == (16384, CALL_FLOOR)
    again = launch_pass_of(prof, cost, sem, got_e, got, ends=mid)
    assert again[1] == pytest.approx(samples[0]["launch_pass_mid"][1], rel=1e-4)


def test_unstalled_drops_the_slow_group_of_a_bimodal_set_and_nothing_else():
    # convnext_tiny's twelve mid passes at 500 Mbit/s (ms, 2026-11-26): three at the link's rate,
    # nine about 100 ms later
    stalled = [1930, 1939, 1946, 2015, 2026, 2036, 2043, 2045, 2047, 2057, 2062, 2078]
    assert unstalled(stalled) == [1930, 1939, 1946]
    # resnet50's at 2 Gbit/s: spread out, no second group beyond 4 standard deviations
    spread = [602, 606, 611, 612, 612, 627, 647, 648, 658, 661, 699, 699]
    assert unstalled(spread) == spread
    # a gap of 4 sd that is under 2% of the median is noise, not a stall (values in seconds)
    tight = [1.0, 1.0001, 1.0002, 1.01, 1.0101]
    assert unstalled(tight) == tight
    # too few to tell a fast group of three from the rest
    assert unstalled([3.0, 1.0, 2.0]) == [1.0, 2.0, 3.0]
    assert unstalled([]) == []
    # each pass once per rank (the probes' copies): the same split
    assert unstalled(stalled * 2) == sorted([1930, 1939, 1946] * 2)
    # in other units alike (seconds)
    assert unstalled([x / 1000 for x in stalled]) == [1.93, 1.939, 1.946]


@given(st.lists(st.floats(0.1, 10.0), min_size=0, max_size=30), st.integers(-6, 6).map(lambda e: 2.0**e))
def test_unstalled_is_a_sorted_prefix_that_keeps_at_least_three_and_ignores_units(xs, scale):
    got = unstalled(xs)
    assert got == sorted(xs)[: len(got)]
    assert len(got) >= min(len(xs), STALL_MIN_CLEAN)
    # the split depends on the shape of the set only: the same passes in other units (powers of two,
    # so that every mean, deviation and median scales exactly) split alike
    assert unstalled([x * scale for x in xs]) == [x * scale for x in got]


def test_launch_costs_fit_the_passes_that_did_not_stall():
    # the two passes of the ratio-by-size test above, made by the simulator with e, r1 and r2;
    # eight of twelve mid passes then stall 5% of the pass on the link: the fit finds r2 as if none
    # had (with the plain median it would put the stall into r2, a rate under compute)
    prof, cost, sem, mid = two_size_passes()
    points = ((16384, 0.8), (163840, 1.1))
    first = launch_pass_of(prof, cost, sem, 1e-4, points)
    clean = launch_pass_of(prof, cost, sem, 1e-4, points, ends=mid)
    jitter = [0.0, 0.0005, 0.001, 0.0015] * 3
    mids = [(clean[0], clean[1] * (1.05 if i >= 4 else 1.0) + jitter[i], clean[2]) for i in range(12)]
    samples = [{"launch_pass": first, "launch_pass_mid": m} for m in mids]
    _, got = launch_costs(samples, sem, prof, cost, 0.0)
    # the median of the four that did not stall: 0.75 ms of jitter
    _, exact = launch_costs([{"launch_pass": first, "launch_pass_mid": (clean[0], clean[1] + 0.00075, clean[2])}], sem, prof, cost, 0.0)
    assert got[1][1] == pytest.approx(exact[1][1], abs=1e-4)
    assert got[1][1] < 1.2  # the stall is not in it


def test_measured_semantics_carry_the_fitted_launch_costs():
    # all-reduces queue behind compute (3 ms each, 0.5 ms of compute per gradient): e and the ratio apart
    prof = ModelProfile("m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", 4, 0.0005) for i in range(20)))
    cost = AlphaBeta(3e-3, 0.0)
    base = [probe() for _ in range(3)]
    contention = contention_of(base, threads=2)
    sem0 = semantics_of(contention, "gloo")
    samples = [{**p, "launch_pass": launch_pass_of(prof, cost, sem0, 1e-4, 1.3)} for p in base]
    sem = measured_semantics(samples, contention, "gloo", prof, cost)
    assert sem.launch_compute_s == pytest.approx(1e-4, abs=1e-6) and sem.launch_factor_points == ((4, pytest.approx(1.3, abs=1e-4)),)
    assert sem.call_overhead_s == 0.0 and (sem.compute_slowdown, sem.under_compute) == (sem0.compute_slowdown, sem0.under_compute)


def test_profile_scales_backward_to_the_light_steps_and_adds_finalize_after_the_last_all_reduce():
    order = ModelProfile("m", 1, "cpu", "measured", 0.1, (TensorSpec("a", 400, 0.0), TensorSpec("b", 400, 0.0)))
    # recorded: forward ends at 0.1, a ready at 0.2, b at 0.4 (0.3 s of backward, hooks included)
    steps = ProfileSteps(order, (0.1,) * 3, ((0.2, 0.4),) * 3, (0.01,) * 3, (0.004,) * 3, (0.24, 0.2, 0.1))
    prof = steps.profile()
    # the light steps' median backward is 0.2 s: both tensors' times shrink by 2/3, shape kept
    assert [t.backward_s for t in prof.tensors] == [pytest.approx(0.1 * 2 / 3), pytest.approx(0.2 * 2 / 3)]
    assert prof.forward_s == 0.1 and prof.optimizer_s == pytest.approx(0.014)  # finalize + optimizer
    assert steps.finalize() == pytest.approx(0.004)
    assert sum(t.backward_s for t in steps.profile(pick_light=[0, 0, 0]).tensors) == pytest.approx(0.24)
    # reports from before either was measured: the recorded times as they are
    old = ProfileSteps(order, (0.1,) * 3, ((0.2, 0.4),) * 3, (0.01,) * 3).profile()
    assert [t.backward_s for t in old.tensors] == [pytest.approx(0.1), pytest.approx(0.2)] and old.optimizer_s == 0.01


@pytest.mark.parametrize("factor, c, message_s", [(1.3, 0.5, 0.4), (1.3, 0.5, 3.0), (0.6, 0.2, 2.5), (2.0, 0.0, 0.9)])
def test_chain_factor_inverts_the_simulator_also_when_the_chain_outlasts_the_pass(factor, c, message_s):
    """One all-reduce of ``message_s`` alone launched at the start of a 1 s backward pass, simulated
    with a known factor under compute: chain_factor gives the factor back whether it ended first
    or outlasted the pass (then only the part under compute went at that factor). The ratio of per
    call times, which the probe used before, is right only in the first case."""
    from commsched.calibrate import chain_factor

    size = int(message_s * 1e6)  # 1 us per byte
    prof = ModelProfile("p", 1, "cpu", "measured", 0.0, (TensorSpec("m", size, 0.0), TensorSpec("w", 4, 1.0)))
    sem = Semantics("gloo", 2, 0.0, c, 0.0, 0.0, None, ((size, factor),))
    tl = simulate_run(prof, (1, 2), AlphaBeta(0.0, 1e-6), sem)
    end, backward = tl.allreduces[0].end_s, tl.compute_s
    # (to 1e-4: the pass's own 4-byte bucket shares the link for its 4 us)
    assert chain_factor(message_s, end, backward, 1) == pytest.approx(factor, rel=1e-4)
    if end > backward:
        assert end / message_s != pytest.approx(factor, rel=1e-3)
    samples = [{**probe(), f"chain_{size}": (message_s, end, backward, 1)}] * 3
    assert contention_of(samples)["under_compute"][-1] == [size, pytest.approx(factor, rel=1e-4)]


def test_chain_factor_without_a_pass_or_time_alone():
    from commsched.calibrate import chain_factor

    assert chain_factor(0.002, 0.003) == pytest.approx(1.5)  # the pass not kept: the ratio
    assert chain_factor(0.0, 0.003, 1.0) is None
    # ended 2 s after a 1 s pass but only 1.5 s alone: more than its whole time after the pass
    assert chain_factor(1.5, 3.0, 1.0) is None
    # outlasted a 1 ms pass and did 0.02 ms of its 1 s of work under it: too noisy to divide by
    assert chain_factor(1.0, 1.00098, 0.001) is None
    assert chain_factor(1.0, 1.5, 1.0) == pytest.approx(2.0)  # half its work under compute: kept


def test_probe_sizes_reach_the_largest_bucket_up_to_64_mib():
    from commsched.calibrate import MIB, probe_sizes

    assert probe_sizes(4096) == (16384,)
    assert probe_sizes(5 * MIB) == (16384, 131072, MIB)
    assert probe_sizes(8 * MIB) == (16384, 131072, MIB, 8 * MIB)
    assert probe_sizes(49_609_710 // 4 * 4 + 2) == (16384, 131072, MIB, 8 * MIB, 49_609_708)  # googlenet's gradients
    assert probe_sizes(244_403_360) == (16384, 131072, MIB, 8 * MIB, 64 * MIB)  # alexnet's


def test_paired_error_is_the_models_error_when_the_machine_changes_speed_between_rounds():
    from commsched.calibrate import paired_error

    order = ModelProfile("m", 1, "cpu", "measured", 0.1, tuple(TensorSpec(n, 4_000_000, 0.0) for n in "abc"))
    cost = AlphaBeta(0.002, 2e-8)  # 82 ms a tensor: the all-reduces outlast the compute between them
    sem = Semantics("gloo", 2, compute_slowdown=0.2, under_compute=((4, 1.3),))
    ends = (1, 2, 3)
    # 6 rounds at 0.6 of full speed, then 6 at full speed (resnet18 at 2 Gbit/s, 2026-11-24, was
    # slow for 7 of 12), two steps a round: compute slows, the all-reduces do not
    speeds = [0.6] * 6 + [1.0] * 6
    fwd, ready, opt, light = [], [], [], []
    for v in speeds:
        for _ in range(2):
            fwd.append(0.03 / v)
            ready.append(tuple((0.03 + 0.02 * k) / v for k in (1, 2, 3)))
            opt.append(0.005 / v)
        light.append(0.06 / v)
    steps = ProfileSteps(order, tuple(fwd), tuple(ready), tuple(opt), (0.0,) * len(fwd), tuple(light))
    truth = []
    for r in range(len(speeds)):
        p = steps.profile([2 * r, 2 * r + 1], [r])
        truth += [simulate_run(p, ends, cost, sem).iteration_s] * 2
    pooled = simulate_run(steps.profile(), ends, cost, sem).iteration_s / sorted(truth)[len(truth) // 2] - 1
    # the median profile (between the phases) does not predict the median step (between them too)
    assert abs(pooled) > 0.02, pooled
    # one light step a round, run just before the variant's steps
    exact = paired_error(steps, steps.profile(), ends, cost, sem, truth, 2, list(range(12)), resamples=50)
    assert exact["error_paired"] == pytest.approx(0.0, abs=1e-12) and exact["error_paired_ci95"] == pytest.approx([0.0, 0.0], abs=1e-12)
    # a model 5% slow in every round is 5% slow, whatever the machine did
    slow = paired_error(steps, steps.profile(), ends, cost, sem, [t / 1.05 for t in truth], 2, list(range(12)), resamples=50)
    assert slow["error_paired"] == pytest.approx(0.05) and len(slow["error_per_round"]) == len(speeds)
    # paired with the wrong light steps (every round with the first, a slow one), the error is not 0
    assert paired_error(steps, steps.profile(), ends, cost, sem, truth, 2, [0] * 12, resamples=50)["error_paired"] > 0.02
    with pytest.raises(CommschedError, match="no whole round"):
        paired_error(steps, steps.profile(), ends, cost, sem, truth[:1], 2, [0], resamples=50)
    with pytest.raises(CommschedError, match="not among the 12"):
        paired_error(steps, steps.profile(), ends, cost, sem, truth, 2, [12] * 12, resamples=50)


def test_the_semantics_fit_from_samples_alone_is_the_runs():
    """fit_semantics, the calibration without a run (issue 33 reuses it on a training job's own
    samples), is what validate does with its probes: contention_of, then the launch costs."""
    from commsched.calibrate import fit_semantics

    prof = ModelProfile("m", 1, "cpu", "measured", 0.05, tuple(TensorSpec(f"t{i}", 4, 0.0005) for i in range(20)))
    cost = AlphaBeta(3e-3, 0.0)
    base = [probe(pair=(0.01, 0.01 + 0.0001 * k)) for k in range(6)]
    sem0 = semantics_of(contention_of(base, threads=2), "gloo")
    samples = [{**p, "launch_pass": launch_pass_of(prof, cost, sem0, 1e-4, 1.3)} for p in base]
    sem, contention = fit_semantics(samples, prof, cost, "gloo", threads=2, resamples=50)
    assert contention == contention_of(samples, 50, 2)
    assert sem == measured_semantics(samples, contention, "gloo", prof, cost)
    assert sem.concurrency_gain > 0 and sem.launch_compute_s == pytest.approx(1e-4, abs=1e-5)
