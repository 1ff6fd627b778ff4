"""What launching DDP's buckets from the backward pass costs, fitted to the probes' launch passes.

Two numbers of the runtime's semantics (:mod:`commsched.sim.semantics`) come from here: the compute
each bucket launched from the backward pass takes (``launch_compute_s``) and by what ratio those
buckets' factor under compute differs from the probe chains', by size (``launch_factor_points``),
fitted by :func:`launch_costs` to the launch passes that did not stall on the link
(:func:`unstalled`). :func:`chain_factor` reads the factor under compute of one probe chain. Pure:
no torch (the passes themselves are measured by :class:`commsched.runtime.validate.probes.LaunchSteps`).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from commsched.cost.models import Table
from commsched.planners import DDP
from commsched.sim.events import simulate_run
from commsched.sim.semantics import CALL_FLOOR, Semantics
from commsched.types import ModelProfile

# the second launch pass: stock DDP with caps of 1 / MID_PASS_BUCKETS of the gradients' bytes, so
# about that many buckets, all but the last of at least that size (4-15 on the zoo's models, medians of 1-38 MiB),
# where plans for a slow link put theirs (resnet18's and googlenet's optimal plans at 500 Mbit/s:
# 11 buckets; BENCHMARKS.md); the first pass's median bucket is 1-16 KiB
MID_PASS_BUCKETS = 16


def mid_pass_planner(profile: ModelProfile) -> DDP:
    """The planner of :class:`~commsched.runtime.validate.probes.LaunchSteps`' second pass (see ``MID_PASS_BUCKETS``)."""
    cap = max(1, sum(t.bytes for t in profile.tensors) // MID_PASS_BUCKETS)
    return DDP(cap_bytes=cap, first_bucket_bytes=cap)


def pass_ends(planner, profile: ModelProfile) -> tuple[int, ...]:
    """The bucket ends of a launch pass's plan (the planners used here need no costs)."""
    return tuple(planner.ends(profile, Table((1, 2), (1.0, 1.0))))



# a launch pass "stalled" when it sits in a slow group of passes set apart from the fast group by a
# gap of at least STALL_SEPARATION population standard deviations of the fast group and
# STALL_MIN_GAP of the median pass, the fast group holding at least STALL_MIN_CLEAN values (each
# pass once per rank in the probes) (:func:`unstalled`; the numbers and their test on the stored runs: BENCHMARKS.md, "Launch passes
# that stall on the link")
STALL_SEPARATION = 4.0
STALL_MIN_GAP = 0.02
STALL_MIN_CLEAN = 3


def unstalled(ends_s: list[float], separation: float = STALL_SEPARATION) -> list[float]:
    """``ends_s`` sorted, without the passes that stalled on the link: when the values fall into a
    fast group and a slow one (the split of largest between-group variance, Otsu's, with at least
    ``STALL_MIN_CLEAN`` values in the fast group) separated by a gap of at least ``separation``
    (default ``STALL_SEPARATION``; ``inf`` keeps every pass) standard deviations of the fast group
    and ``STALL_MIN_GAP`` of the median, the fast group; otherwise all of them. Values as given: the probes hold each pass once per rank
    (every rank keeps the same slowest-rank times), so on two ranks three values can be two passes;
    a bootstrap's repeated draws count as often as drawn.

    Why: on the emulated cluster at 500 Mbit/s a pass or a step of stock DDP moving about 110 MiB
    either ran at the link's rate or took about 100 ms (5%) longer, the slow ones mostly with TCP
    retransmissions in the rank's counters, at a share that changed from run to run (10-75% of a
    variant's steps, whatever its buckets; ``benchmarks/investigations/bucket_rates.py``, BENCHMARKS.md). The
    launch ratio is a rate under compute: fitted to the median of passes most of which had stalled,
    it came out 1.23-1.29 where the unstalled passes give 0.93-0.96, and stock DDP's buckets, which
    the stalls had mostly spared in those rounds, were predicted 3-4% slow."""
    xs = sorted(ends_s)
    n = len(xs)
    if n <= STALL_MIN_CLEAN:
        return xs
    k = max(range(STALL_MIN_CLEAN, n), key=lambda i: i * (n - i) * (statistics.fmean(xs[i:]) - statistics.fmean(xs[:i])) ** 2)
    gap = xs[k] - xs[k - 1]
    if gap > 0 and gap >= separation * statistics.pstdev(xs[:k]) and gap >= STALL_MIN_GAP * statistics.median(xs):
        return xs[:k]
    return xs


def launch_costs(
    samples: list[dict], semantics: Semantics, profile: ModelProfile, cost, finalize_s: float, separation: float = STALL_SEPARATION
) -> tuple[float, tuple[tuple[int, float], ...]]:
    """The semantics' ``launch_compute_s`` e and ``launch_factor_points`` from :class:`~commsched.runtime.validate.probes.LaunchSteps`'
    samples: (e, ((b1, r1),)) from the pass with one bucket per gradient (key ``launch_pass``)
    alone, or (e, ((b1, r1), (b2, r2))) when the samples also hold the pass of
    :func:`mid_pass_planner` (key ``launch_pass_mid``) and its median bucket is at least twice the
    first pass's: b1 and b2 are the two passes' median bucket sizes, r1 and r2 the ratio at them by
    which a bucket's factor under compute differs from the probe chains' (:meth:`Semantics.bucket_factor`:
    linear in log2(b) between the points, flat beyond them).

    The values are those with which the simulator, under ``semantics`` (its other numbers), on
    ``profile`` with ``cost`` (the cost table of the same minutes) and each pass's buckets, ends
    compute when the first pass's median last gradient was ready (e: compute work per bucket
    launched; every pass counts) and each pass's last all-reduce when its median ``backward()``
    returned among the passes that did not stall on the link (:func:`unstalled` with ``separation``), less
    ``finalize_s`` (DDP copying the gradients back, measured in the profile steps) (r). e is the
    least value >= 0 that reaches its target (0 when none is needed, at most a second), each r the
    least in [``CALL_FLOOR``, 64] (a pass that ends sooner than its floor allows is left that much
    short: at 500 Mbit/s the pass with a bucket per gradient ended 6-9.5% sooner than the simulator
    says with r = 1 on resnet18, resnet50 and googlenet, mostly after compute, where no r acts;
    BENCHMARKS.md). All by bisection, e and then each r in turn until none moves by a millionth
    (r changes when all-reduces are in flight, which changes the rate compute runs at; each pass's
    buckets take some of the other point's r), at most 12 times. Where the all-reduces keep up with
    compute (no queue), r too only slows compute and the two cannot be told apart: then the fit
    puts what it can in e, and the pass is made again all the same. (0, ()) for samples from before
    the pass was measured.

    Limits: bisection takes each pass's end to rise with r, which holds when two all-reduces in
    flight slow compute no less than one (c2 >= c); with a c2 below c a higher r can end a pass up
    to 0.5% sooner (seen on random small profiles), and the fit may then stop at a nearby value.
    The loop's last values are returned even when 12 rounds did not settle them. The mid pass's
    buckets are rebuilt from ``MID_PASS_BUCKETS``, not stored with the samples: runs made with
    another value cannot be fitted again correctly.

    A ratio, not a time per call (the earlier ``call_overhead_s`` d, fitted at two sizes), because a
    bandwidth-bound all-reduce's time under compute scales with its size: d fitted at the passes'
    sizes and applied between them made plans of 17-48 mid-size buckets 4-7% too fast on the same
    runs where the ratio is within 2% (BENCHMARKS.md, "a ratio, not a time per call")."""
    got = [s["launch_pass"] for s in samples if s.get("launch_pass")]
    if not got or not profile.tensors:
        return 0.0, ()
    backward_s = statistics.median(x[0] for x in got)
    passes = [(tuple(range(1, len(profile.tensors) + 1)), statistics.median(unstalled([x[1] for x in got], separation)) - finalize_s)]
    mid = [s["launch_pass_mid"] for s in samples if s.get("launch_pass_mid")]
    if mid:
        passes.append((pass_ends(mid_pass_planner(profile), profile), statistics.median(unstalled([x[1] for x in mid], separation)) - finalize_s))
    prefix = [0]
    for t in profile.tensors:
        prefix.append(prefix[-1] + t.bytes)
    medians = [int(statistics.median_low([prefix[b] - prefix[a] for a, b in zip((0, *ends), ends)])) for ends, _ in passes]
    if len(passes) == 2 and medians[1] < 2 * medians[0]:  # one size in effect: one ratio, from the first pass
        passes, medians = passes[:1], medians[:1]

    def run(k: int, e: float, rs: list[float]) -> tuple[float, float]:
        sem = replace(semantics, launch_compute_s=e, call_overhead_s=0.0, launch_factor_points=tuple(zip(medians, rs)))
        tl = simulate_run(profile, passes[k][0], cost, sem)
        return tl.compute_s - profile.forward_s, tl.iteration_s - profile.optimizer_s - profile.forward_s

    def least(f, target: float, lo: float, hi: float, cap: float) -> float:
        """The least x >= lo with f(x) >= target (f rises with x), bracketed from hi by doubling up to cap."""
        if f(lo) >= target:
            return lo
        while f(hi) < target:
            if hi >= cap:  # beyond any runtime: take it as the bound
                return cap
            lo, hi = hi, min(cap, hi * 2.0)
        for _ in range(24):  # to a ten-millionth of the bracket
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return hi

    def with_r(rs: list[float], k: int, x: float) -> list[float]:
        return [x if i == k else r for i, r in enumerate(rs)]

    e, rs = 0.0, [1.0] * len(passes)
    for _ in range(12):  # until none moves by a millionth
        was = [e, *rs]
        e = least(lambda x: run(0, x, rs)[0], backward_s, 0.0, 1e-4, 1.0)
        for k, (_, end_s) in enumerate(passes):
            rs[k] = least(lambda x: run(k, e, with_r(rs, k, x))[1], end_s, CALL_FLOOR, 1.0, 64.0)
        if all(abs(a - b) < 1e-6 for a, b in zip(was, [e, *rs])):
            break
    return e, tuple(zip(medians, rs))



def chain_factor(alone_s: float, under_s: float, backward_s: float | None = None, calls: int = 1) -> float | None:
    """The factor under compute (the semantics' ``under_compute``) of a chain of ``calls``
    all-reduces, ``alone_s`` per call alone and ``under_s`` per call when launched at the start of a
    backward pass that took ``backward_s``: the chain's time while compute ran over the time that
    part of its work takes alone. A chain that outlasted the pass went at its speed alone after it
    (:mod:`commsched.sim.semantics`), so that part is taken off both: with T = calls x alone_s, U =
    calls x under_s and overlap = min(U, backward_s), the factor is overlap / (T - (U - overlap));
    U / T when the chain ended first (or ``backward_s`` is not known). None when there is nothing to
    divide by (no time alone, or a chain that ran on after the pass for longer than all of it takes
    alone: noise), and when a chain that outlasted the pass did less than a twentieth of its work
    under compute: the difference of two noisy times then decides the factor (a factor past the
    semantics' bound of 100 stops the run; suspected, not confirmed, in one test run on loopback
    whose rank 0 stopped with an error the test cut off)."""
    total_alone, total_under = calls * alone_s, calls * under_s
    overlap = total_under if backward_s is None else min(total_under, backward_s)
    work = total_alone - (total_under - overlap)
    if overlap <= 0 or work <= 0 or (overlap < total_under and work < total_alone / 20):
        return None
    return overlap / work

