"""The simulator under execution semantics: NCCL's serial run is the previous contended simulator
unchanged; gloo's threads that share the link without gain end every iteration when the serial run
does; more threads with gain never make the last all-reduce later than sharing does."""

from __future__ import annotations

import json
import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES
from commsched.sim.events import simulate_run
from commsched.sim.semantics import CALL_FLOOR, GLOO, NCCL, Semantics, semantics_from_json
from commsched.sim.timeline import prefix_bytes
from commsched.types import ModelProfile, TensorSpec
from tests.conftest import costs, profiles

factors = st.one_of(st.just(0.0), st.floats(0.0, 2.0))
overheads = st.one_of(st.just(0.0), st.floats(0.0, 0.05))
signed_overheads = st.one_of(overheads, st.floats(-0.05, 0.0))  # d < 0: down to its floor


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


def frozen_serial_contended(forward_s, work, pb, ends, cost, slow_compute, slow_comm):
    """The contended simulator's event loop as it was before execution semantics (commit 170d484),
    kept verbatim as the reference the NCCL case must still equal."""
    n = len(work)
    t = forward_s
    i, left = 0, work[0]
    queue: deque[int] = deque()
    active, comm_left = -1, 0.0
    j_next = 0
    starts, finishes = [0.0] * len(ends), [0.0] * len(ends)
    backward_end = t
    while i < n or active >= 0 or queue:
        if active < 0 and queue:
            active = queue.popleft()
            comm_left = cost.time_s(pb[ends[active]] - pb[ends[active - 1] if active else 0])
            starts[active] = t
        computing = i < n
        r_compute = 1.0 / slow_compute if active >= 0 else 1.0
        r_comm = 1.0 / slow_comm if computing else 1.0
        dt_compute = left / r_compute if computing else math.inf
        dt_comm = comm_left / r_comm if active >= 0 else math.inf
        dt = min(dt_compute, dt_comm)
        if dt == math.inf:
            break
        t += dt
        if computing:
            left = 0.0 if dt == dt_compute else left - dt * r_compute
        if active >= 0:
            comm_left = 0.0 if dt == dt_comm else comm_left - dt * r_comm
        if computing and left <= 0.0:
            i += 1
            if i == ends[j_next]:
                queue.append(j_next)
                j_next += 1
            if i < n:
                left = work[i]
            else:
                backward_end = t
        if active >= 0 and comm_left <= 0.0:
            finishes[active] = t
            active = -1
    return starts, finishes, backward_end


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), factors, factors)
def test_nccl_is_the_previous_contended_simulator(profile, cost, name, cs, ms):
    ends = STRATEGIES[name].ends(profile, cost)
    tl = simulate_run(profile, ends, cost, Semantics(compute_slowdown=cs, comm_slowdown=ms))
    s, f, b = frozen_serial_contended(
        profile.forward_s, [t.backward_s for t in profile.tensors], prefix_bytes(profile), ends, cost, 1 + cs, 1 + ms
    )
    assert close(tl.iteration_s, f[-1] + profile.optimizer_s) and close(tl.compute_s, b)
    for span, s0, f0 in zip(tl.allreduces, s, f):
        assert close(span.start_s, s0) and close(span.end_s, f0)


under_tables = st.one_of(
    st.just(()),
    st.lists(st.floats(0.3, 2.0), min_size=1, max_size=4).map(lambda fs: tuple((4 ** (3 + 3 * i), f) for i, f in enumerate(fs))),
)
# one factor for every size: what serial equivalence needs (factors that differ by size break it)
uniform_tables = st.one_of(st.just(()), st.tuples(st.floats(0.3, 2.0), st.integers(1, 3)).map(lambda x: tuple((4 ** (3 + 3 * i), x[0]) for i in range(x[1]))))


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), factors, factors, overheads, st.integers(2, 4), uniform_tables, overheads)
def test_gloo_threads_sharing_the_link_end_when_the_serial_run_ends(profile, cost, name, cs, ms, d, threads, table, e):
    d = 0.0  # d / T(b) differs by size: not serial-equivalent (test below)
    assert Semantics("gloo", threads, 0.0, cs, ms, d, None, table, e).serial_equivalent
    ends = STRATEGIES[name].ends(profile, cost)
    serial = simulate_run(profile, ends, cost, Semantics(compute_slowdown=cs, comm_slowdown=ms, call_overhead_s=d, under_compute=table, launch_compute_s=e))
    gloo = simulate_run(profile, ends, cost, Semantics("gloo", threads, 0.0, cs, ms, d, None, table, e))
    assert close(gloo.iteration_s, serial.iteration_s, 1e-7) and close(gloo.compute_s, serial.compute_s, 1e-7)


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), factors, factors, signed_overheads)
def test_one_gloo_thread_is_the_serial_run(profile, cost, name, cs, ms, d):
    ends = STRATEGIES[name].ends(profile, cost)
    a = simulate_run(profile, ends, cost, Semantics(compute_slowdown=cs, comm_slowdown=ms, call_overhead_s=d))
    b = simulate_run(profile, ends, cost, Semantics("gloo", 1, 0.5, cs, ms, d))
    assert [(x.start_s, x.end_s) for x in a.allreduces] == [(x.start_s, x.end_s) for x in b.allreduces]


@given(profiles(max_tensors=30), costs, st.sampled_from(sorted(STRATEGIES)), st.floats(0.0, 1.0), st.integers(2, 4))
def test_in_flight_never_exceeds_the_threads_and_order_is_fifo(profile, cost, name, gain, threads):
    ends = STRATEGIES[name].ends(profile, cost)
    tl = simulate_run(profile, ends, cost, Semantics("gloo", threads, gain, 0.3, 0.1, 0.001))
    spans = tl.allreduces
    starts = [s.start_s for s in spans]
    assert starts == sorted(starts)  # FIFO: executed in launch order
    ready = profile.ready_s
    for j, s in enumerate(spans):
        assert s.start_s >= ready[ends[j] - 1] * (1 - 1e-12) and s.end_s >= s.start_s
        running = sum(1 for o in spans if o.start_s <= s.start_s < o.end_s)
        assert running <= threads


@given(profiles(max_tensors=20), st.sampled_from(sorted(STRATEGIES)), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_more_gain_never_ends_later_without_contention(profile, name, g1, g2):
    cost = AlphaBeta(1e-3, 1e-9)
    ends = STRATEGIES[name].ends(profile, cost)
    lo, hi = sorted((g1, g2))
    a = simulate_run(profile, ends, cost, Semantics("gloo", 2, lo)).iteration_s
    b = simulate_run(profile, ends, cost, Semantics("gloo", 2, hi)).iteration_s
    assert b <= a * (1 + 1e-9)


def test_hand_worked_gloo_sharing():
    # three tensors ready at 1, 1, 1 (forward 1 s, no backward work), one bucket each of T = 2 s.
    p = ModelProfile("m", 1, "d", "estimated", 1.0, tuple(TensorSpec(n, 10, 0.0) for n in "abc"))
    cost = AlphaBeta(2.0, 0.0)
    # two threads sharing the link: a and b run together at half speed, end at 5; c runs 5..7
    tl = simulate_run(p, (1, 2, 3), cost, GLOO)
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(1.0, 5.0), (1.0, 5.0), (5.0, 7.0)]
    assert tl.iteration_s == 7.0 == simulate_run(p, (1, 2, 3), cost, NCCL).iteration_s
    # with gain 1 they do not slow each other: a, b end at 3, c at 5
    tl = simulate_run(p, (1, 2, 3), cost, Semantics("gloo", 2, 1.0))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(1.0, 3.0), (1.0, 3.0), (3.0, 5.0)]


def test_call_overhead_acts_only_while_compute_runs():
    # a (1 s of backward) then b (1 s): bucket a, launched at 2 while b computes, takes T + d there
    # (factor 1 + d / T); bucket b, launched after compute, takes T
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0), TensorSpec("b", 10, 1.0)))
    tl = simulate_run(p, (1, 2), AlphaBeta(0.5, 0.0), Semantics(call_overhead_s=0.25))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 2.75), (3.0, 3.5)]
    # T = 1, d = 0.5: factor 1.5 until compute ends at 3 (2/3 of a done), the last third alone: 3 + 1/3;
    # b then waits for the stream and takes 1
    tl = simulate_run(p, (1, 2), AlphaBeta(1.0, 0.0), Semantics(call_overhead_s=0.5))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, pytest.approx(3 + 1 / 3)), (pytest.approx(3 + 1 / 3), pytest.approx(4 + 1 / 3))]
    # d makes the factor differ by size: two threads end otherwise than one stream, so not serial-equivalent
    assert not Semantics("gloo", 2, call_overhead_s=0.5).serial_equivalent and Semantics("gloo", 2).serial_equivalent


def test_a_negative_call_overhead_speeds_buckets_up_to_its_floor():
    # as above, T = 1 for bucket a under b's compute: d = -0.5 gives factor 0.5 (a ends at 2.5); d =
    # -0.9 would give 0.1, the floor holds it at a quarter of the factor (a ends at 2.25)
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0), TensorSpec("b", 10, 1.0)))
    tl = simulate_run(p, (1, 2), AlphaBeta(1.0, 0.0), Semantics(call_overhead_s=-0.5))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 2.5), (3.0, 4.0)]
    assert CALL_FLOOR == 0.25
    tl = simulate_run(p, (1, 2), AlphaBeta(1.0, 0.0), Semantics(call_overhead_s=-0.9))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 2.25), (3.0, 4.0)]
    assert Semantics(under_compute=((10, 0.4),), call_overhead_s=-0.1).min_factor_under_compute == pytest.approx(0.1)
    assert Semantics(under_compute=((10, 0.4),), call_overhead_s=0.1).min_factor_under_compute == 0.4


def test_the_launch_ratio_by_size_is_interpolated_in_log2_and_flat_beyond():
    s = Semantics(under_compute=((1024, 2.0),), launch_factor_points=((1024, 0.5), (4096, 1.5)))
    assert s.bucket_factor(1024) == pytest.approx(1.0) and s.bucket_factor(2048) == pytest.approx(2.0)
    assert s.bucket_factor(16) == pytest.approx(1.0) and s.bucket_factor(1 << 30) == pytest.approx(3.0)
    assert list(s.bucket_factor(np.array([512, 2048, 8192]))) == pytest.approx([1.0, 2.0, 3.0])
    assert Semantics(under_compute=((8, 0.8),)).bucket_factor(7) == 0.8 and list(Semantics().bucket_factor(np.array([7, 8]))) == [1, 1]
    assert s.contended and s.min_factor_under_compute == pytest.approx(1.0)
    assert not Semantics("gloo", 2, launch_factor_points=s.launch_factor_points).serial_equivalent
    assert Semantics("gloo", 2, launch_factor_points=((8, 0.7), (64, 0.7))).serial_equivalent
    assert not Semantics(launch_factor_points=((8, 1.0),)).contended and Semantics(launch_factor_points=((8, 0.9),)).contended
    assert Semantics(call_overhead_s=-0.1, launch_factor_points=((8, 0.5),)).min_factor_under_compute == pytest.approx(0.5 * CALL_FLOOR)
    assert semantics_from_json(json.loads(json.dumps(s.to_json()))) == s


@given(
    profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)), st.floats(0.3, 3.0), st.floats(CALL_FLOOR, 3.0),
    st.sampled_from([("nccl", 1), ("gloo", 2)]),
)
def test_one_launch_ratio_for_every_size_is_the_factor_times_it(profile, cost, name, factor, ratio, backend):
    ends = STRATEGIES[name].ends(profile, cost)
    one = simulate_run(profile, ends, cost, Semantics(*backend, compute_slowdown=0.4, under_compute=((64, factor * ratio),)))
    points = simulate_run(
        profile, ends, cost, Semantics(*backend, compute_slowdown=0.4, under_compute=((64, factor),), launch_factor_points=((64, ratio), (1 << 20, ratio)))
    )
    flat = lambda tl: [t for x in tl.allreduces for t in (x.start_s, x.end_s)]  # noqa: E731
    assert flat(one) == pytest.approx(flat(points), rel=1e-9, abs=1e-12)


def test_the_launch_ratio_gives_each_bucket_that_of_its_size():
    # as test_call_overhead_acts_only_while_compute_runs: bucket a (10 B, T = 0.5) launched at 2
    # under b's compute; ratio(10 B) = 1.5 from the points, so a takes 0.75 and ends at 2.75; b is
    # launched after compute, where no ratio acts
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 1.0), TensorSpec("b", 10, 1.0)))
    ratios = ((10, 1.5), (1000, 0.5))
    tl = simulate_run(p, (1, 2), AlphaBeta(0.5, 0.0), Semantics(launch_factor_points=ratios))
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 2.75), (3.0, 3.5)]
    # the same bucket at 1000 B (T still 0.5 with beta 0): ratio 0.5, under a factor of 3 there: 0.75
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 1000, 1.0), TensorSpec("b", 10, 1.0)))
    tl = simulate_run(p, (1, 2), AlphaBeta(0.5, 0.0), Semantics(under_compute=((1000, 3.0),), launch_factor_points=ratios))
    assert tl.allreduces[0].end_s == pytest.approx(2.75)


@pytest.mark.parametrize(
    "bad",
    [
        {"launch_factor_points": ((16, 1.0), (8, 1.0))},
        {"launch_factor_points": ((16, float("nan")),)},
        {"launch_factor_points": ((16, 0.2),)},
        {"launch_factor_points": ((16, 101.0),)},
        {"launch_factor_points": ((0, 1.0),)},
        {"launch_factor_points": ((16.0, 1.0),)},
        {"launch_factor_points": 3},
        {"backend": "mpi"},
        {"backend": "nccl", "threads": 2},
        {"backend": "gloo", "threads": 0},
        {"backend": "gloo", "threads": True},
        {"concurrency_gain": 1.5},
        {"compute_slowdown": -0.1},
        {"comm_slowdown": float("nan")},
        {"call_overhead_s": float("inf")},
        {"call_overhead_s": -2e3},
        {"under_compute": ((16, 0.5), (8, 1.0))},
        {"under_compute": ((16, 0.0),)},
        {"under_compute": ((16,),)},
        {"under_compute": 3},
        {"launch_compute_s": -1e-3},
        {"launch_compute_s": float("nan")},
    ],
)
def test_bad_semantics_are_errors(bad):
    with pytest.raises(CommschedError):
        Semantics(**bad)


def test_hand_worked_factor_under_compute():
    # a (1 s of backward) then b (1 s): bucket a (1000 B) runs under compute at 1 / factor(1000) of
    # its speed; with points (10 B, 0.5) and (10**5 B, 1.5), log-linear: factor 1.0 at 1000 B
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 1000, 1.0), TensorSpec("b", 1000, 1.0)))
    sem = Semantics(under_compute=((10, 0.5), (10**5, 1.5)))
    assert sem.factor_under_compute(1000) == pytest.approx(1.0)
    assert sem.factor_under_compute(1) == 0.5 and sem.factor_under_compute(10**9) == 1.5  # flat beyond
    sem = Semantics(under_compute=((10, 0.5), (1000, 0.5)))
    tl = simulate_run(p, (1, 2), AlphaBeta(0.5, 0.0), sem)
    # a: its 0.5 s alone at twice the speed from 2.0 (compute runs to 3.0); b after compute: 0.5 s
    assert [(s.start_s, s.end_s) for s in tl.allreduces] == [(2.0, 2.25), (3.0, 3.5)]


def test_the_factor_under_compute_acts_only_while_compute_runs():
    # a (1 s of backward, 1000 B), then b: a's all-reduce (2 s alone, factor 0.5 under compute) is
    # launched at 2.0. With b's backward 2 s, compute outlasts it: 2 s of work in 1 s, end 3.0.
    # With b's backward 0.5 s, compute ends at 2.5 having done 1 s of its work: the other 1 s goes
    # at its speed alone, to 3.5 (charged whole at launch, as before issue 11's fix, 3.0).
    cost = AlphaBeta(2.0, 0.0)
    sem = Semantics(under_compute=((10, 0.5), (10**5, 0.5)))
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 1000, 1.0), TensorSpec("b", 1000, 2.0)))
    assert simulate_run(p, (1, 2), cost, sem).allreduces[0].end_s == 3.0
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 1000, 1.0), TensorSpec("b", 1000, 0.5)))
    assert simulate_run(p, (1, 2), cost, sem).allreduces[0].end_s == 3.5


def test_a_launch_costs_compute_while_compute_has_work_left():
    # a, b, c (1 s of backward each), one bucket each; launching costs compute e = 0.5 s: a's launch
    # at 2.0 delays b to 3.5, b's delays c to 5.0; c's bucket is launched after compute, free
    p = ModelProfile("m", 1, "d", "estimated", 1.0, tuple(TensorSpec(x, 10, 1.0) for x in "abc"))
    tl = simulate_run(p, (1, 2, 3), AlphaBeta(0.1, 0.0), Semantics(launch_compute_s=0.5))
    assert [x for s in tl.allreduces for x in (s.start_s, s.end_s)] == pytest.approx([2.0, 2.1, 3.5, 3.6, 5.0, 5.1])
    assert tl.compute_s == pytest.approx(5.0)
    # under an all-reduce the launch's work goes at 1 / (1 + c) like the rest: c = 1, a's all-reduce
    # of 2 s from 2.0: e (0.5 of work) and b's first 0.5 take 2 s; b's last 0.5 s alone: 4.5
    p = ModelProfile("m", 1, "d", "estimated", 1.0, tuple(TensorSpec(x, 10, 1.0) for x in "ab"))
    tl = simulate_run(p, (1, 2), AlphaBeta(2.0, 0.0), Semantics(compute_slowdown=1.0, launch_compute_s=0.5))
    assert tl.compute_s == pytest.approx(4.5)
    assert Semantics(launch_compute_s=0.5).contended


def test_factors_that_differ_by_size_are_not_serial_on_gloo_threads():
    # big (1000 B: 4 s alone, factor 2 under compute) and small (250 B: 1 s, factor 0.5), both
    # launched at 1.0 under 8 s of compute. One thread: big takes 8 s (to 9.0, when compute ends),
    # small then 1 s (to 10.0). Gloo's two threads sharing the link: small goes at 1/2 / 0.5 = 1 and
    # ends at 2.0; big at 1/2 / 2 until then (0.25 of work), then alone under compute at 1/2 (3.5
    # of work by 9.0), then beside c's bucket (launched at 9.0, after compute) at 1/2: 9.5.
    sem = Semantics(under_compute=((250, 0.5), (1000, 2.0)))
    cost = AlphaBeta(0.0, 4.0 / 1000)
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("big", 1000, 0.0), TensorSpec("small", 250, 0.0), TensorSpec("c", 250, 8.0)))
    gloo_sem = Semantics("gloo", 2, under_compute=sem.under_compute)
    assert sem.serial_equivalent and not gloo_sem.serial_equivalent
    serial = simulate_run(p, (1, 2, 3), cost, sem).allreduces
    gloo = simulate_run(p, (1, 2, 3), cost, gloo_sem).allreduces
    assert [s.end_s for s in serial[:2]] == pytest.approx([9.0, 10.0])
    assert [s.end_s for s in gloo[:2]] == pytest.approx([9.5, 2.0])


def test_semantics_json_round_trip_and_errors():
    s = Semantics("gloo", 2, 0.1, 0.5, 0.05, 0.002, 0.6, ((16384, 0.7), (1 << 20, 1.2)), 0.0003)
    assert semantics_from_json(json.loads(json.dumps(s.to_json()))) == s
    with pytest.raises(CommschedError, match="unknown field"):
        semantics_from_json({"threads": 1, "speed": 2})
    with pytest.raises(CommschedError):
        semantics_from_json([1])


@given(profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)), factors, st.floats(0.0, 1.0))
def test_compute_slowed_more_by_two_in_flight_is_never_faster(profile, cost, name, c1, extra):
    ends = STRATEGIES[name].ends(profile, cost)
    same = simulate_run(profile, ends, cost, Semantics("gloo", 2, 0.0, c1, 0.1))
    more = simulate_run(profile, ends, cost, Semantics("gloo", 2, 0.0, c1, 0.1, 0.0, c1 + extra))
    assert more.iteration_s >= same.iteration_s * (1 - 1e-9)
    assert Semantics("gloo", 2, 0.0, c1, 0.1, 0.0, c1).serial_equivalent
    assert Semantics("gloo", 2, 0.0, c1, 0.1, 0.0, c1 + extra).serial_equivalent == (c1 + extra == c1)


def test_hand_worked_compute_under_two_all_reduces():
    # forward 1 s; a (0 s) then b (0 s) then c (3 s of backward); buckets a, b ready at 1 s, T = 2 s
    # each, sharing the link: both run 1..5. Compute of c runs at 1/(1 + c2) = 1/3 while both are in
    # flight: 4 s x 1/3 = 4/3 s of work by t = 5, the remaining 5/3 s at full speed: ready at 20/3 s.
    p = ModelProfile("m", 1, "d", "estimated", 1.0, (TensorSpec("a", 10, 0.0), TensorSpec("b", 10, 0.0), TensorSpec("c", 10, 3.0)))
    tl = simulate_run(p, (1, 2, 3), AlphaBeta(2.0, 0.0), Semantics("gloo", 2, 0.0, 0.5, 0.0, 0.0, 2.0))
    assert tl.compute_s == pytest.approx(20 / 3)
    # with c2 = c = 0.5: 4 s x 2/3 = 8/3 of work by 5, 1/3 s more: 16/3
    tl = simulate_run(p, (1, 2, 3), AlphaBeta(2.0, 0.0), Semantics("gloo", 2, 0.0, 0.5))
    assert tl.compute_s == pytest.approx(16 / 3)
