"""Validate predictions against measurement on a real process group (run under torchrun).

What is measured is the path users take: every strategy's plan run by stock
``DistributedDataParallel`` with its bucket caps (:func:`commsched.ddp_options`), beside stock DDP
with its defaults. Every rank, in lockstep:

1. measures the compute profile inside training steps of stock DDP with one bucket (SyncEASGD's
   plan: its only all-reduce follows backward, nothing overlaps compute), recorded by
   :class:`~commsched.runtime.record.StepRecorder`. Per step each tensor's ready time is the
   slowest rank's (a synchronous step waits for it); the profile is the median over steps;
2. benchmarks all-reduce as DDP's reducer issues it: k buckets of one size launched back to back
   into the process group (gloo's FIFO queue and threads do the rest), time per call from the
   first launch to the last end; a ``table`` cost model of those times (made non-decreasing) is
   what predictions use;
3. measures the runtime's semantics (:mod:`commsched.sim.semantics`): the process group's thread
   count; the concurrency gain (two all-reduces launched together against one); compute slowed
   by one all-reduce in flight (c) and by two (c2); and, at four message sizes, k-chains of
   all-reduces launched at the start of a backward pass against the same alone: the per-size
   factor of an all-reduce under compute (``under_compute``, LIBRA's p(c, r) depending on the
   message size c), which also holds the per-call costs as the runtime issues them; and two
   backward passes of stock DDP, one with a bucket per gradient and one with about
   ``MID_PASS_BUCKETS`` buckets: what launching a bucket from the backward pass costs compute
   (``launch_compute_s``) and by what ratio the buckets' factor under compute differs from the
   chains', by size (``launch_factor_points``), fitted by :func:`launch_costs` to the passes
   that did not stall on the link (:func:`unstalled`);
4. scores every strategy under those semantics; ``optimal`` plans for them (to within 1% of the
   serial run's optimum without launch costs, then the best of that, the plain optimum and one
   bucket under the measured semantics: :class:`~commsched.planners.Optimal`);
5. trains every strategy and stock DDP, interleaved round by round (A B C ... C A B ..., a random
   order each round, the same on every rank), each from the same weights; speedups over stock DDP
   and, beside the pooled error, the prediction error (:func:`paired_error`) are paired in time;
   each round also repeats the profile steps and one probe of step 3 (with the cost table's own
   measurement at the probe sizes, by which the table is brought to the rounds' minutes), so that
   what predicts and what is predicted are measured over the same minutes (this machine's compute
   and all-reduce times drift 10-50% between minutes), and runs one unrecorded profile step just
   before each variant's steps (the machine's speed at that moment, for the paired error). After the rounds each variant runs recorded steps (stock DDP,
   :class:`~commsched.runtime.record.StepRecorder`) for the measured timelines.

Rank 0 prints predicted vs measured step time with the error and its 95% bootstrap interval, and the
measured speedup over stock DDP's defaults with its interval, and writes ``validate.json``,
``validate.png``, the measured profile (``profile.json``) and the measured and predicted timeline of
the fastest strategy (``measured-trace.json``, ``measured-gantt.png``).
"""

from __future__ import annotations

import copy
import math
import random
import statistics
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import Table
from commsched.cost.fit import nondecreasing_points
from commsched.errors import CommschedError
from commsched.planners import DDP, MIN_GAIN_OVER_DDP, STRATEGIES, WFBP, SyncEASGD, make_plan, planner_for
from commsched.planners.optimal import check_min_gain
from commsched.runtime.bench_comm import CommSamples
from commsched.sim.contention import simulate_run
from commsched.sim.semantics import CALL_FLOOR, GLOO_DEFAULT_THREADS, Semantics
from commsched.sim.timeline import ends_of_plan
from commsched.types import ModelProfile, Plan, TensorSpec

STOCK = "torch-ddp"
MIB = 1 << 20
PROBE_SIZES = (16 * 1024, 128 * 1024, 1 * MIB, 8 * MIB)  # from per-call costs to bandwidth
# the gain of two all-reduces at once is measured where they move data: a 16 KiB pair measured a
# "gain" of 0.2-1.2 that was only two wake-ups overlapped (one alone waits for its thread to wake,
# two launched together share that wait), while the same runs measured -0.3 to +0.1 at 1 MiB; the
# per-call costs of small all-reduces back to back are in the cost table already (bench_chains)
GAIN_SIZES = (1 * MIB, 8 * MIB)
# beyond PROBE_SIZES one more probe at the largest bucket a plan can have (every gradient), capped
# here: the factor under compute and the cost table's drift were flat beyond 8 MiB before, and
# wrong there. googlenet's 24 MB buckets went faster under compute than the 8 MiB chains said (its
# plans over-predicted by 5-7%), and alexnet's 233 MB all-reduce took the 8 MiB anchors' drift of
# -7% it did not have (1023 ms measured before the rounds and 1020 in a separate run, 950
# predicted: synceasgd -6.8%)
LARGE_PROBE_MAX = 64 * MIB


def probe_sizes(max_bytes: int) -> tuple[int, ...]:
    """The probe's message sizes for a model whose gradients are ``max_bytes`` in all:
    ``PROBE_SIZES`` up to it, and beyond 8 MiB ``min(max_bytes, LARGE_PROBE_MAX)`` (a multiple of 4)."""
    sizes = [s for s in PROBE_SIZES if s <= max(max_bytes, PROBE_SIZES[0])]
    large = min(max_bytes, LARGE_PROBE_MAX) // 4 * 4
    if large > PROBE_SIZES[-1]:
        sizes.append(large)
    return tuple(sizes)


@dataclass(frozen=True)
class ValidationConfig:
    model: str
    batch_size: int
    image_size: int | None = None
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    rounds: int = 12
    steps: int = 2  # timed steps per variant per round (one untimed step of each before round 1)
    profile_iters: int = 8  # profile steps before the run (for planning); each round repeats ``steps``
    probe_iters: int = 4  # probes (step 3) before the run; each round repeats one
    resamples: int = 200  # bootstrap resamples for the 95% intervals
    chain_repeats: int = 5  # timed chains per message size in the cost benchmark
    recorded_steps: int = 2  # recorded steps per variant after the rounds
    lr: float = 0.01
    out_dir: str = "out/validate"
    min_gain: float = MIN_GAIN_OVER_DDP  # optimal keeps stock DDP's buckets below this predicted gain

    def __post_init__(self) -> None:
        check_min_gain(self.min_gain)
        for what in ("batch_size", "rounds", "steps", "profile_iters", "probe_iters", "resamples", "chain_repeats", "recorded_steps"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100_000:
                raise CommschedError(f"validate {what} must be a whole number in [1, 100000], got {v!r}")


# --- the runtime ------------------------------------------------------------------------------


def runtime_threads(group=None) -> int:
    """How many collectives the process group runs at once: gloo's worker threads (read from the
    backend's options), 1 for NCCL (one stream per communicator)."""
    if dist.get_backend(group) != "gloo":
        return 1
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return int(pg._get_backend(torch.device("cpu")).options._threads)
    except (AttributeError, RuntimeError) as e:  # a private API: say so, and use torch 2.14's default
        warnings.warn(f"could not read gloo's thread count ({e}); assuming {GLOO_DEFAULT_THREADS}", stacklevel=2)
        return GLOO_DEFAULT_THREADS


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _launch_chain(buffers: list[torch.Tensor]):
    """Launch one all-reduce per buffer back to back, as DDP's reducer launches ready buckets; the
    returned list receives the time the last one completed (stamped by its completion callback)."""
    done: list[float] = []
    works = [dist.all_reduce(b, async_op=True) for b in buffers]
    stamped = works[-1].get_future().then(lambda _f: done.append(time.perf_counter()))
    return works, stamped, done


def _chain_s(buffers: list[torch.Tensor]) -> float:
    t0 = time.perf_counter()
    works, stamped, done = _launch_chain(buffers)
    for w in works:
        w.wait()
    stamped.wait()
    return done[0] - t0


def _max_over_ranks(values: list[float], op=dist.ReduceOp.MAX) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def chain_length(size_bytes: int) -> int:
    """Calls per timed chain: 8 for small messages (their per-call cost is what is measured), fewer
    as messages grow, one from 8 MiB on."""
    return max(1, min(8, (8 * MIB) // size_bytes))


def bench_chains(sizes_bytes: tuple[int, ...], repeats: int) -> CommSamples:
    """All-reduce time per call as the runtime issues it (module docstring, step 2).

    ``time_s`` is per size the slowest rank's median over ``repeats`` chains of the chain's time
    per call. Within a chain the time is a mean over its calls (a plan's buckets pay the mean, and
    on this project's 2-core machines per-call times are bimodal, an answer at once or after a
    scheduler tick); over chains the median (``statistic`` "median"), since what is predicted is a
    median step, and a median step does not pay a chain that stalled: googlenet's cost table once
    had 16 MiB at 90 ms, the mean of four chains averaging 73 ms and one of 160 ms, where every other
    size went at the link's 239 MB/s; that one point put its buckets of 13-18 MB 10-18 ms too slow and
    its 7-bucket plans 8% (BENCHMARKS.md). ``min_s``/``max_s`` the fastest and slowest chain's
    per-call time on any rank. Every rank must call it with the same arguments.
    """
    sizes = tuple(sorted(set(sizes_bytes)))
    if not sizes or any(s <= 0 or s % 4 for s in sizes):
        raise CommschedError(f"chain sizes must be positive multiples of 4 bytes, got {list(sizes_bytes)}")
    device = _comm_device()
    medians, lows, highs = [], [], []
    for s in sizes:
        k = chain_length(s)
        bufs = [torch.zeros(s // 4, device=device) for _ in range(k)]
        _chain_s(bufs)  # warm-up: first touch of the buffers
        dist.barrier()
        per_call = [_chain_s(bufs) / k for _ in range(repeats)]
        medians.append(statistics.median(per_call))
        lows.append(min(per_call))
        highs.append(max(per_call))
    return CommSamples(
        dist.get_backend(), dist.get_world_size(), sizes,
        tuple(_max_over_ranks(medians)), tuple(_max_over_ranks(lows, dist.ReduceOp.MIN)), tuple(_max_over_ranks(highs)),
        statistic="median",
    )


def table_cost(samples: CommSamples, gain: float = 0.0, threads: int = 1) -> Table:
    """The measured per-call times as a ``table`` cost of one all-reduce alone, made non-decreasing
    in size by pooling adjacent violators (a larger message never costs less; what is left of a dip
    is noise), and flat below the smallest size measured.

    Chains of more than one call ran on the runtime's threads: with a concurrency ``gain`` two in
    flight went 1 + gain times as fast as one, so their per-call time is multiplied back by that
    (the simulator applies the gain itself)."""
    times = [
        t * (1.0 + gain) if threads > 1 and chain_length(size) > 1 else t
        for size, t in zip(samples.sizes_bytes, samples.time_s)
    ]
    return Table(*nondecreasing_points(samples.sizes_bytes, times))


# --- probes: contention and concurrency -----------------------------------------------------------


class _LightStamps:
    """The end of forward and the ready times of the last few gradients of a DDP model's steps,
    from one forward hook and post-accumulate hooks on the last ``LAST`` tensors of the ready order
    (the last one to be ready can vary): a step stamped without a recorder's cost per gradient and
    per bucket."""

    LAST = 4

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, names: tuple[str, ...]) -> None:
        self.forward_end = 0.0
        self.ready: list[float] = []
        ddp.register_forward_hook(lambda *_: setattr(self, "forward_end", time.perf_counter()))
        params = dict(ddp.module.named_parameters())
        for name in names[-self.LAST :]:
            params[name].register_post_accumulate_grad_hook(lambda _p: self.ready.append(time.perf_counter()))

    def since(self, t0: float) -> tuple[float, float]:
        """(end of forward, last gradient) of the step just run, seconds since ``t0``."""
        return self.forward_end - t0, max(self.ready, default=self.forward_end) - t0


# the second launch pass: stock DDP with caps of 1 / MID_PASS_BUCKETS of the gradients' bytes, so
# about that many buckets, all but the last of at least that size (4-15 on the zoo's models, medians of 1-38 MiB),
# where plans for a slow link put theirs (resnet18's and googlenet's optimal plans at 500 Mbit/s:
# 11 buckets; BENCHMARKS.md); the first pass's median bucket is 1-16 KiB
MID_PASS_BUCKETS = 16


def mid_pass_planner(profile: ModelProfile) -> DDP:
    """The planner of :class:`_LaunchSteps`' second pass (see ``MID_PASS_BUCKETS``)."""
    cap = max(1, sum(t.bytes for t in profile.tensors) // MID_PASS_BUCKETS)
    return DDP(cap_bytes=cap, first_bucket_bytes=cap)


def pass_ends(planner, profile: ModelProfile) -> tuple[int, ...]:
    """The bucket ends of a launch pass's plan (the planners used here need no costs)."""
    return tuple(planner.ends(profile, Table((1, 2), (1.0, 1.0))))


class _LaunchSteps:
    """Stock DDP with a fixed plan, *not* recorded: one bucket per gradient (``wfbp``'s plan, the
    default) or ``planner``'s. What launching buckets from the backward pass costs compute (the
    semantics' ``launch_compute_s``) and how fast they go under compute beside the chains
    (``launch_factor_points``, by size from two such passes), fitted by
    :func:`launch_costs`. Not recorded because the recorder's per-bucket calls cost more than what
    is measured here: on densenet121's 364 buckets a recorded step took 15% longer than the same
    DDP instance's unrecorded one (``benchmarks/overhead.py densenet121 8 64 8 wfbp``, BENCHMARKS.md).
    Only :class:`_LightStamps` stamp it.
    :meth:`sample` runs one forward and backward pass (no optimizer) and returns, each the slowest
    rank's: (seconds from the end of the forward pass to the last gradient, seconds from it to the
    return of ``backward()`` (every bucket reduced and the gradients copied back), the buckets
    launched while compute had work left)."""

    def __init__(self, order: ModelProfile, model: nn.Module, inputs: tuple, loss_fn, planner=None) -> None:
        from commsched.runtime.ddp import ddp_options

        self.model = copy.deepcopy(model)
        plan = make_plan(planner or WFBP(), order, Table((1, 2), (1.0, 1.0)))
        self.ddp = nn.parallel.DistributedDataParallel(self.model, **ddp_options(plan, self.model))
        self.inputs, self.loss_fn = inputs, loss_fn
        # the last gradient's bucket is launched after compute: the others while it had work left
        self.launched_under_compute = max(0, len(plan.buckets) - 1)
        self.stamps = _LightStamps(self.ddp, order.names)
        for _ in range(2):  # the first builds DDP's buckets in ready order
            self.sample()

    def sample(self) -> tuple[float, float, int]:
        self.ddp.zero_grad(set_to_none=True)
        self.stamps.ready.clear()
        dist.barrier()  # before the forward, as in training
        t0 = time.perf_counter()
        self.loss_fn(self.ddp(*self.inputs)).backward()
        done = time.perf_counter()
        mine = (*self.stamps.since(t0), done - t0)
        # since the barrier, the slowest rank's, as the profile's times: a rank whose forward ended
        # early waits for the other's gradients, so its own pass is not the step's
        forward, last, end = (max(x[i] for x in _gather(mine)) for i in range(3))
        return last - forward, end - forward, self.launched_under_compute


# a launch pass "stalled" when it sits in a slow group of passes set apart from the fast group by a
# gap of at least STALL_SEPARATION population standard deviations of the fast group and
# STALL_MIN_GAP of the median pass, the fast group holding at least STALL_MIN_CLEAN values (each
# pass once per rank in the probes) (:func:`unstalled`; the numbers and their test on the stored runs: BENCHMARKS.md, "Launch passes
# that stall on the link")
STALL_SEPARATION = 4.0
STALL_MIN_GAP = 0.02
STALL_MIN_CLEAN = 3


def unstalled(ends_s: list[float]) -> list[float]:
    """``ends_s`` sorted, without the passes that stalled on the link: when the values fall into a
    fast group and a slow one (the split of largest between-group variance, Otsu's, with at least
    ``STALL_MIN_CLEAN`` values in the fast group) separated by a gap of at least
    ``STALL_SEPARATION`` standard deviations of the fast group and ``STALL_MIN_GAP`` of the median,
    the fast group; otherwise all of them. Values as given: the probes hold each pass once per rank
    (every rank keeps the same slowest-rank times), so on two ranks three values can be two passes;
    a bootstrap's repeated draws count as often as drawn.

    Why: on the emulated cluster at 500 Mbit/s a pass or a step of stock DDP moving about 110 MiB
    either ran at the link's rate or took about 100 ms (5%) longer, the slow ones mostly with TCP
    retransmissions in the rank's counters, at a share that changed from run to run (10-75% of a
    variant's steps, whatever its buckets; ``benchmarks/bucket_rates.py``, BENCHMARKS.md). The
    launch ratio is a rate under compute: fitted to the median of passes most of which had stalled,
    it came out 1.23-1.29 where the unstalled passes give 0.93-0.96, and stock DDP's buckets, which
    the stalls had mostly spared in those rounds, were predicted 3-4% slow."""
    xs = sorted(ends_s)
    n = len(xs)
    if n <= STALL_MIN_CLEAN:
        return xs
    k = max(range(STALL_MIN_CLEAN, n), key=lambda i: i * (n - i) * (statistics.fmean(xs[i:]) - statistics.fmean(xs[:i])) ** 2)
    gap = xs[k] - xs[k - 1]
    if gap > 0 and gap >= STALL_SEPARATION * statistics.pstdev(xs[:k]) and gap >= STALL_MIN_GAP * statistics.median(xs):
        return xs[:k]
    return xs


def launch_costs(
    samples: list[dict], semantics: Semantics, profile: ModelProfile, cost, finalize_s: float
) -> tuple[float, tuple[tuple[int, float], ...]]:
    """The semantics' ``launch_compute_s`` e and ``launch_factor_points`` from :class:`_LaunchSteps`'
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
    returned among the passes that did not stall on the link (:func:`unstalled`), less
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
    passes = [(tuple(range(1, len(profile.tensors) + 1)), statistics.median(unstalled([x[1] for x in got])) - finalize_s)]
    mid = [s["launch_pass_mid"] for s in samples if s.get("launch_pass_mid")]
    if mid:
        passes.append((pass_ends(mid_pass_planner(profile), profile), statistics.median(unstalled([x[1] for x in mid])) - finalize_s))
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


class _Probe:
    """One :meth:`sample` measures, interleaved so that drift hits them alike (every rank in lockstep):

    - a backward pass alone, and one with a long all-reduce launched at its start (compute slowdown
      c: the message is sized from the cost table to outlast the backward pass, capped at 256 MiB;
      when it ends first, compute was slowed only until then, which the fit accounts for, and the
      sample is counted in ``long_message_ended_early``);
    - with more than one runtime thread, a backward pass with two such all-reduces launched at its
      start (compute slowdown c2 while both are in flight);
    - for each probe size b (:func:`probe_sizes`): a chain of k all-reduces alone, and the same
      chain launched at the start of a backward pass (k sized so the chain takes about a third of
      the backward pass, at least one call: the largest size's one call may outlast the pass,
      which :func:`chain_factor` accounts for);
    - for each gain size: one all-reduce alone and two launched together;
    - at each probe size, the cost table's own measurement (:func:`bench_chains`' chain), so the
      table measured before the rounds can be brought to the rounds' minutes (:func:`drifted`);
    - with ``launches`` (:class:`_LaunchSteps`: one bucket per gradient, and
      :func:`mid_pass_planner`'s), one pass of each: what launching buckets from the backward pass
      costs compute and how fast they go under compute by size (:func:`launch_costs`).

    Each forward runs first, untimed, and ranks meet at a barrier before each timed part.
    """

    def __init__(
        self, model: nn.Module, inputs: tuple, loss_fn, cost: Table, max_bytes: int, launches: tuple[_LaunchSteps, ...] = ()
    ) -> None:
        self.model, self.inputs, self.loss_fn = copy.deepcopy(model), inputs, loss_fn
        self.launches = launches
        self._backward(self._forward())
        backward = max(_max_over_ranks([statistics.median(self._backward(self._forward()) for _ in range(3))]))
        per_byte = max(cost.time_s(64 * MIB) - cost.time_s(MIB), 1e-12) / (63 * MIB)
        device = _comm_device()
        self.long_msg = torch.zeros(int(min(max(3.0 * backward / per_byte, MIB), 2**28)) // 4, device=device)
        self.second_msg = torch.zeros_like(self.long_msg) if runtime_threads() > 1 else None
        self.sizes = probe_sizes(max_bytes)
        self.chains = {
            s: [torch.zeros(s // 4, device=device) for _ in range(max(1, min(32, round(backward / 3 / max(cost.time_s(s), 1e-6)))))]
            for s in self.sizes
        }
        self.pairs = {s: [torch.zeros(s // 4, device=device) for _ in range(2)] for s in GAIN_SIZES}
        # the cost table's own measurement (chains of chain_length) at the probe sizes, every round
        self.anchors = {s: [torch.zeros(s // 4, device=device) for _ in range(chain_length(s))] for s in self.sizes}
        self.ended_early = 0

    def _forward(self) -> torch.Tensor:
        # gradients set to None first, as the training steps' optimizer does: a backward pass into
        # existing gradients adds into them, and on alexnet (233 MiB of gradients) the probe's
        # passes took 816 ms against the training steps' 509, which put compute's slowdown under
        # an all-reduce at c = 0.09 against 0.31 before the rounds, and its plans 5-11% short
        # (BENCHMARKS.md)
        self.model.zero_grad(set_to_none=True)
        return self.loss_fn(self.model(*self.inputs))

    def _backward(self, loss: torch.Tensor) -> float:
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    def sample(self) -> dict:
        out: dict = {}
        loss = self._forward()
        dist.barrier()
        out["backward_s"] = self._backward(loss)
        loss = self._forward()
        dist.barrier()
        t0 = time.perf_counter()
        works, stamped, done = _launch_chain([self.long_msg])
        out["backward_under_allreduce_s"] = self._backward(loss)
        works[0].wait()
        stamped.wait()
        # compute was slowed only while the all-reduce was in flight: until it ended, if it ended first
        out["overlap_s"] = min(done[0] - t0, out["backward_under_allreduce_s"])
        self.ended_early += done[0] - t0 < out["backward_under_allreduce_s"]
        if self.second_msg is not None:  # two at once (gloo's threads): compute's slowdown c2
            loss = self._forward()
            dist.barrier()
            ends: list[float] = []
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, async_op=True) for b in (self.long_msg, self.second_msg)]
            stamped = [w.get_future().then(lambda _f: ends.append(time.perf_counter())) for w in works]
            under = self._backward(loss)
            for w, f in zip(works, stamped):
                w.wait()
                f.wait()
            out["backward_under_two_s"] = under
            out["overlap_two_s"] = min(min(ends) - t0, under)  # both in flight
            out["overlap_any_s"] = min(max(ends) - t0, under)  # at least one
        for s, bufs in self.chains.items():
            dist.barrier()
            alone = _chain_s(bufs) / len(bufs)
            loss = self._forward()
            dist.barrier()
            t0 = time.perf_counter()
            works, stamped, done = _launch_chain(bufs)
            under = self._backward(loss)
            for w in works:
                w.wait()
            stamped.wait()
            # per call alone, per call under compute, that backward pass, calls
            out[f"chain_{s}"] = (alone, (done[0] - t0) / len(bufs), under, len(bufs))
        for s, bufs in self.anchors.items():
            dist.barrier()
            out[f"anchor_{s}"] = _chain_s(bufs) / len(bufs)
        for s, (a, b) in self.pairs.items():
            dist.barrier()
            one = _chain_s([a])
            dist.barrier()
            out[f"pair_{s}"] = (one, _chain_s([a, b]))
        for key, launches in zip(("launch_pass", "launch_pass_mid"), self.launches):
            out[key] = launches.sample()
        return out

    def report(self, samples: list[dict], resamples: int, threads: int) -> dict:
        return {
            **contention_of(samples, resamples, threads),
            "long_message_bytes": self.long_msg.numel() * 4,
            "chain_calls": {str(s): len(b) for s, b in self.chains.items()},
            "long_message_ended_early": self.ended_early,  # this rank's count so far
        }


def contention_of(
    samples: list[dict], resamples: int = 0, threads: int = 1, seed: int = 0, decided: dict | None = None
) -> dict:
    """The semantics' measured numbers from :meth:`_Probe.sample` dicts (of any ranks): medians,
    then ratios. The gain's and c2's 95% bootstrap intervals decide whether they are used (else 0
    and None); ``decided`` (a previous result) imposes those decisions instead, so that a bootstrap
    of the prediction resamples the estimator that made it."""
    med = lambda key, i=None: statistics.median(s[key] if i is None else s[key][i] for s in samples)  # noqa: E731
    alone_b, under_b, overlap = med("backward_s"), med("backward_under_allreduce_s"), med("overlap_s")
    chain_keys = sorted((k for k in samples[0] if k.startswith("chain_")), key=lambda k: int(k[6:]))
    per_size = {k[6:]: (med(k, 0), med(k, 1)) for k in chain_keys}
    # the per-size factor of all-reduces launched under compute: the semantics' ``under_compute``
    factors = {k[6:]: chain_factor(*per_size[k[6:]], *((med(k, 2), samples[0][k][3]) if len(samples[0][k]) >= 4 else ())) for k in chain_keys}
    under_compute = [[int(k), f] for k, f in factors.items() if f is not None]
    pair_keys = [k for k in samples[0] if k.startswith("pair_")]

    def gain(ss) -> float:
        vals = [2 * statistics.median(s[k][0] for s in ss) / statistics.median(s[k][1] for s in ss) - 1 for k in pair_keys]
        return statistics.median(vals) if vals else 0.0

    g = gain(samples)
    lo = hi = g
    if resamples and len(samples) > 1:
        rng = random.Random(seed)
        lo, hi = _interval([gain([samples[rng.randrange(len(samples))] for _ in samples]) for _ in range(resamples)])
    if decided is not None:
        use_gain = decided["concurrency_gain"] > 0
    else:
        use_gain = threads > 1 and lo > 0
    used = min(1.0, max(0.0, g)) if use_gain else 0.0
    c1 = _compute_slowdown(samples)
    c2 = _compute_slowdown_two(samples, c1)
    diff_lo = diff_hi = None if c2 is None else c2 - c1
    if c2 is not None and resamples and len(samples) > 1:
        rng = random.Random(seed + 1)
        diffs = []
        for _ in range(resamples):
            pick = [samples[rng.randrange(len(samples))] for _ in samples]
            pc1 = _compute_slowdown(pick)
            pc2 = _compute_slowdown_two(pick, pc1)
            if pc2 is not None:
                diffs.append(pc2 - pc1)
        if diffs:
            diff_lo, diff_hi = _interval(diffs)
    # like the gain, c2 is used only where it differs from c1 beyond the noise (the interval of
    # c2 - c1 excludes 0): otherwise gloo's run is the serial one and ``optimal`` is exact for it
    if decided is not None:
        use_c2 = decided["compute_slowdown_concurrent"] is not None
    else:
        use_c2 = c2 is not None and threads > 1 and diff_lo is not None and not diff_lo <= 0 <= diff_hi
    c2_used = c2 if (use_c2 and c2 is not None) else None
    # reported, not (yet) in the semantics: the backward pass's time under a chain beyond what the
    # rate 1 / (1 + c) explains while the chain was in flight, per call (CPU time a call takes from
    # compute on the rank's core); None for probes that did not keep it
    compute_per_call = {}
    for k in chain_keys:
        if len(samples[0][k]) >= 4:
            calls = samples[0][k][3]
            under_chain = med(k, 2)
            in_flight = min(calls * med(k, 1), under_chain)
            compute_per_call[k[6:]] = (under_chain - alone_b - in_flight * c1 / (1.0 + c1)) / calls
    return {
        "threads": threads,
        "compute_alone_s": alone_b,
        "compute_under_allreduce_s": under_b,
        # compute ran at 1 / (1 + c) while the all-reduce was in flight (see _compute_slowdown)
        "compute_slowdown": c1,
        "compute_slowdown_concurrent_measured": c2,
        "compute_slowdown_concurrent_minus_single_ci95": [diff_lo, diff_hi],
        "compute_slowdown_concurrent": c2_used,
        "compute_overlap_s": overlap,
        "under_compute": under_compute,
        # ratio: per call under compute over alone; factor: while compute ran (chain_factor)
        "allreduce_per_call_s": {
            k: {"alone": a, "under_compute": u, "ratio": u / a if a > 0 else None, "factor": factors[k]} for k, (a, u) in per_size.items()
        },
        "compute_per_call_s": compute_per_call or None,
        "concurrency_gain_measured": g,
        "concurrency_gain_ci95": [lo, hi],
        "concurrency_gain": used,
        "samples": len(samples),
    }


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


def _interval(values: list[float]) -> tuple[float, float]:
    """The central 95% of ``values``: 2.5% of them off each end."""
    vs = sorted(values)
    cut = int(0.025 * len(vs))
    return vs[cut], vs[len(vs) - 1 - cut]


# a slower rate than this is read as "compute stopped" (a noisy median can imply a rate <= 0)
MAX_COMPUTE_SLOWDOWN = 50.0


def slowdown_of_rate(work_s: float, wall_s: float) -> float:
    """c such that ``work_s`` of uncontended compute took ``wall_s`` at the rate 1 / (1 + c)."""
    if wall_s <= 0:
        return 0.0
    if work_s <= wall_s / (1.0 + MAX_COMPUTE_SLOWDOWN):
        return MAX_COMPUTE_SLOWDOWN
    return max(0.0, wall_s / work_s - 1.0)


def _compute_slowdown(samples: list[dict]) -> float:
    """c of the simulator's rate 1 / (1 + c) (:mod:`commsched.sim.contention`), from medians.

    ``overlap_s`` is wall time, during the slowed backward pass, with the all-reduce in flight:
    the backward pass did ``alone - (under - overlap)`` of its uncontended work in those
    ``overlap`` seconds. (Reading under = alone + c x overlap instead, as this project did before,
    gives the fraction of the overlap lost, 1 - 1 / (1 + c): c = 0.48 where the rate model's c is
    0.92, and predictions of overlapped steps too short.)"""
    overlap = statistics.median(s["overlap_s"] for s in samples)
    under = statistics.median(s["backward_under_allreduce_s"] for s in samples)
    alone = statistics.median(s["backward_s"] for s in samples)
    return slowdown_of_rate(alone - (under - overlap), overlap) if overlap > 0 else 0.0


def _compute_slowdown_two(samples: list[dict], c1: float) -> float | None:
    """c2 of the rate 1 / (1 + c2) while both all-reduces were in flight: the backward pass did
    ``alone - (under2 - any) - (any - two) / (1 + c1)`` of its work in the ``two`` seconds
    (wall times: ``any`` with at least one in flight, ``two`` with both)."""
    if "backward_under_two_s" not in samples[0]:
        return None
    med = lambda key: statistics.median(s[key] for s in samples)  # noqa: E731
    o2, o_any, under = med("overlap_two_s"), med("overlap_any_s"), med("backward_under_two_s")
    if o2 <= 0:
        return None
    work = med("backward_s") - (under - o_any) - max(0.0, o_any - o2) / (1.0 + c1)
    return slowdown_of_rate(work, o2)


def anchors_of(samples: list[dict]) -> dict[int, float]:
    """Per probe size, the median per-call time of the cost table's chain in these samples."""
    keys = [k for k in samples[0] if k.startswith("anchor_")]
    return {int(k[7:]): statistics.median(s[k] for s in samples) for k in keys}


def drifted(cost: Table, anchors: dict[int, float]) -> Table:
    """The cost table measured before the rounds, brought to the rounds' minutes: scaled by the
    ratio of the in-round to the table's time at the probe sizes, interpolated in log2(size) and
    flat beyond them. On this machine all-reduce times drifted by a third between the minutes
    before the rounds and the rounds themselves (mobilenet_v2: 4.4 ms against 2.2 ms per 16 KiB
    call), like compute does; the profile is calibrated inside the rounds for the same reason."""
    if not anchors:
        return cost
    sizes = sorted(anchors)
    xs = [math.log2(b) for b in sizes]
    ys = [anchors[b] / max(cost.time_s(b), 1e-12) for b in sizes]
    scale = np.interp(np.log2(np.asarray(cost.bytes, dtype=np.float64)), xs, ys)
    return Table(cost.bytes, tuple(float(t * f) for t, f in zip(cost.seconds, scale)))


def semantics_of(contention: dict, backend: str, launch_compute_s: float = 0.0) -> Semantics:
    """The measured semantics: the per-size factor under compute stands for the rate slowdown m
    of :mod:`commsched.sim.semantics` too (m stays 0: one model, not two); ``launch_compute_s`` and
    ``launch_factor_points`` (how DDP's buckets go under compute beside the chains) are :func:`launch_costs` (they
    need the profile and the cost table as well as the probes)."""
    threads = contention["threads"] if backend == "gloo" else 1
    return Semantics(
        "gloo" if backend == "gloo" else "nccl",
        threads,
        contention["concurrency_gain"] if threads > 1 else 0.0,
        contention["compute_slowdown"],
        0.0,
        0.0,
        contention["compute_slowdown_concurrent"] if threads > 1 else None,
        tuple((b, f) for b, f in contention["under_compute"]),
        launch_compute_s,
    )


def measured_semantics(
    samples: list[dict], contention: dict, backend: str, profile: ModelProfile, cost, finalize_s: float = 0.0
) -> Semantics:
    """:func:`semantics_of` with the launch costs of these probe samples (:func:`launch_costs`)
    against ``profile``, ``cost`` (the cost table of the same minutes) and ``finalize_s``."""
    sem = semantics_of(contention, backend)
    e, points = launch_costs(samples, sem, profile, cost, finalize_s)
    return replace(sem, launch_compute_s=e, call_overhead_s=0.0, launch_factor_points=points)


# --- the compute profile ------------------------------------------------------------------------


class _ProfileSteps:
    """Training steps that measure the compute profile as training sees it: stock DDP with one
    bucket (SyncEASGD's plan), recorded per tensor. :meth:`step` runs one step and, with ``keep``,
    keeps its record and optimizer time; :meth:`take` hands over (and forgets) what was kept.
    :meth:`light_step` runs one with the recorder paused, stamped only by :class:`_LightStamps`:
    the recorder's hook on every gradient lengthens the backward pass (densenet121's 364 hooks: its
    one-bucket plan, these steps' own, was predicted 3-6% slow), so the profile's backward times
    are scaled to the light steps' length (:meth:`take_light`)."""

    def __init__(self, order: ModelProfile, model: nn.Module, inputs: tuple, loss_fn, lr: float) -> None:
        from commsched.runtime.ddp import ddp_options
        from commsched.runtime.record import StepRecorder

        self.model = copy.deepcopy(model)
        plan = make_plan(SyncEASGD(), order, Table((1, 2), (1.0, 1.0)))
        self.ddp = nn.parallel.DistributedDataParallel(self.model, **ddp_options(plan, self.model))
        self.recorder = StepRecorder(self.ddp, order=order.names)
        self.opt = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad], lr=lr, momentum=0.9)
        self.inputs, self.loss_fn = inputs, loss_fn
        self._kept: list[tuple] = []
        self._light: list[tuple[float, float]] = []
        self.stamps = _LightStamps(self.ddp, order.names)

    def step(self, keep: bool) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(self.ddp(*self.inputs)).backward()
        t0 = time.perf_counter()
        self.opt.step()
        optimizer_s = time.perf_counter() - t0
        if keep:
            self._kept.append((self.recorder.records[-1], optimizer_s))
        self.recorder.records.clear()

    def take(self) -> list[tuple]:
        kept, self._kept = self._kept, []
        return kept

    def light_step(self, keep: bool) -> None:
        self.recorder.pause()
        try:
            self.opt.zero_grad(set_to_none=True)
            self.stamps.ready.clear()
            t0 = time.perf_counter()
            self.loss_fn(self.ddp(*self.inputs)).backward()
            self.opt.step()
        finally:
            self.recorder.resume()
        if keep:  # since the start of forward, as the recorder's times
            self._light.append(self.stamps.since(t0))

    def take_light(self) -> list[tuple[float, float]]:
        """(end of forward, last gradient) of each kept light step, seconds since its start."""
        kept, self._light = self._light, []
        return kept


@dataclass(frozen=True)
class ProfileSteps:
    """Per-step compute timings of :class:`_ProfileSteps`, combined over ranks.

    A synchronous step waits for its slowest rank, so per step the forward end, each tensor's ready
    time (since the start of forward), the optimizer time and the finalize time are the maximum
    over ranks. The finalize time runs from the end of the (one) all-reduce to the end of the step's
    ``backward()``: DDP's reducer copying the averaged gradients back into ``param.grad``, which
    every plan pays once for all the gradients (233 MiB on alexnet); empty in reports from before
    it was measured.
    """

    order: ModelProfile
    forward_end_s: tuple[float, ...]  # per step
    ready_s: tuple[tuple[float, ...], ...]  # per step, per tensor in ready order
    optimizer_s: tuple[float, ...]  # per step
    finalize_s: tuple[float, ...] = ()  # per step
    backward_unrecorded_s: tuple[float, ...] = ()  # per light step (:class:`_ProfileSteps`)

    @classmethod
    def of(cls, order: ModelProfile, steps_by_rank: list[list[tuple]], light_by_rank: list[list[tuple]] | None = None) -> ProfileSteps:
        """From every rank's kept (StepRecord, optimizer_s) pairs (the same steps on each rank) and
        light steps' (end of forward, last gradient) times."""
        light = []
        if light_by_rank:
            m = min(len(steps) for steps in light_by_rank)
            for k in range(m):  # the slowest rank's times, as for the recorded steps
                light.append(max(r[k][1] for r in light_by_rank) - max(r[k][0] for r in light_by_rank))
        n = min(len(steps) for steps in steps_by_rank)
        if n == 0:
            raise CommschedError("no profile steps were recorded")
        steps = [[rank[k] for rank in steps_by_rank] for k in range(n)]
        return cls(
            order,
            tuple(max(r.forward_end_s for r, _ in ranks) for ranks in steps),
            tuple(tuple(max(v) for v in zip(*(r.ready_s for r, _ in ranks))) for ranks in steps),
            tuple(max(o for _, o in ranks) for ranks in steps),
            tuple(max(r.step_end_s - max(r.bucket_end_s, default=r.step_end_s) for r, _ in ranks) for ranks in steps),
            tuple(light),
        )

    def finalize(self, pick: list[int] | None = None) -> float:
        """The median finalize time of the steps in ``pick`` (default all); 0 when not measured."""
        if not self.finalize_s:
            return 0.0
        ks = range(len(self.finalize_s)) if pick is None else pick
        return statistics.median(self.finalize_s[k] for k in ks)

    def profile(self, pick: list[int] | None = None, pick_light: list[int] | None = None) -> ModelProfile:
        """The profile of the steps in ``pick`` (default all): each time the median over steps,
        ``backward_s`` the difference between consecutive ready times (clipped at 0), and
        ``optimizer_s`` what follows the last all-reduce: the finalize time and the optimizer's.
        With light steps, the backward times are scaled so that they add up to the light steps'
        median backward pass (``pick_light``: which of them, default all)."""
        ks = range(len(self.forward_end_s)) if pick is None else pick
        forward_s = statistics.median(self.forward_end_s[k] for k in ks)
        tensors, prev = [], forward_s
        for i, t in enumerate(self.order.tensors):
            ready = statistics.median(self.ready_s[k][i] for k in ks)
            tensors.append(TensorSpec(t.name, t.bytes, max(0.0, ready - prev)))
            prev = max(prev, ready)
        total = sum(t.backward_s for t in tensors)
        if self.backward_unrecorded_s and total > 0:
            js = range(len(self.backward_unrecorded_s)) if pick_light is None else pick_light
            scale = max(0.0, statistics.median(self.backward_unrecorded_s[j] for j in js)) / total
            tensors = [replace(t, backward_s=t.backward_s * scale) for t in tensors]
        return replace(
            self.order,
            source="measured",
            forward_s=forward_s,
            optimizer_s=statistics.median(self.optimizer_s[k] + (self.finalize_s[k] if self.finalize_s else 0.0) for k in ks),
            tensors=tuple(tensors),
        )


# --- the run --------------------------------------------------------------------------------------


def _gather(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _step_fn(model: nn.Module, wrapped: nn.Module, inputs: tuple, loss_fn, lr: float):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=0.9)

    def step() -> float:
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(wrapped(*inputs)).backward()
        opt.step()
        return time.perf_counter() - t0

    return step


def run(cfg: ValidationConfig, progress: bool = True) -> dict | None:
    """The whole validation; returns the report on rank 0 (None elsewhere)."""
    from commsched.io import plan_to_json
    from commsched.models.zoo import build_model, example_input, runs_on, training_loss
    from commsched.profile.measure import measure_profile
    from commsched.runtime.bench_comm import fit_cluster
    from commsched.runtime.ddp import ddp_options
    from commsched.runtime.record import StepRecorder

    if not dist.is_initialized():
        raise CommschedError("validate runs under torchrun (or an initialised process group)")
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    threads = runtime_threads()
    say = _printer(rank == 0 and progress)
    inputs = example_input(cfg.model, cfg.batch_size, cfg.image_size)

    def loss_fn(out):
        return training_loss(cfg.model, out)

    torch.manual_seed(0)
    base = build_model(cfg.model)

    say(f"1/5 measuring the profile of {cfg.model} on every rank, inside stock DDP training steps")
    with runs_on(cfg.model, inputs):
        order = measure_profile(base, inputs, loss_fn, name=cfg.model, batch_size=cfg.batch_size, warmup=1, iters=2)
    profile_steps = _ProfileSteps(order, base, inputs, loss_fn, cfg.lr)
    for i in range(cfg.profile_iters + 2):
        profile_steps.step(keep=i >= 2)
        profile_steps.light_step(keep=i >= 2)
    steps_before = ProfileSteps.of(order, _gather(profile_steps.take()), _gather(profile_steps.take_light()))
    profile_before = steps_before.profile()

    say("2/5 benchmarking all-reduce as DDP issues it: buckets launched back to back")
    # up to the largest bucket any plan can have (SyncEASGD's: every gradient), at most 256 MiB;
    # powers of two all the way (buckets of 1-16 MiB are common)
    max_bytes = min(-(-profile_before.total_bytes // 4) * 4, 2**28)
    sizes = tuple(1 << k for k in range(2, max_bytes.bit_length()) if 1 << k < max_bytes) + (max_bytes,)
    samples = bench_chains(sizes, cfg.chain_repeats)
    cost = table_cost(samples)
    cluster = ClusterSpec(
        name=f"measured-{world}x-{backend}-runtime",
        workers=world,
        allreduce=cost,
        source=(
            f"measured by commsched validate: all-reduces of 4 B to {max_bytes} B launched back to back as DDP's "
            f"reducer launches buckets, median over {cfg.chain_repeats} chains of the mean per call, made non-decreasing"
        ),
    )
    _, fit = fit_cluster(samples, name="fit")  # reported beside the table: how well a closed form fits
    cluster, fit = _broadcast_obj((cluster, fit))  # every rank sizes probes and plans with rank 0's numbers

    say("3/5 measuring the runtime: concurrency, compute under an all-reduce, all-reduces under compute")
    launches = (_LaunchSteps(order, base, inputs, loss_fn), _LaunchSteps(order, base, inputs, loss_fn, mid_pass_planner(order)))
    probe = _Probe(base, inputs, loss_fn, cluster.allreduce, max_bytes, launches)
    samples_before = _pooled(_gather([probe.sample() for _ in range(cfg.probe_iters)]))
    contention_before = probe.report(samples_before, cfg.resamples, threads)
    contention_before = _broadcast_obj(contention_before)
    if contention_before["concurrency_gain"]:  # the chains ran two at a time: back to one alone
        cluster = replace(cluster, allreduce=table_cost(samples, contention_before["concurrency_gain"], threads))
    sem_before = _broadcast_obj(
        measured_semantics(samples_before, contention_before, backend, profile_before, cluster.allreduce, steps_before.finalize())
    )

    say(f"4/5 planning every strategy for {_describe(sem_before)}")
    plans: dict[str, Plan] = {
        name: make_plan(planner_for(name, sem_before, min_gain=cfg.min_gain), profile_before, cluster.allreduce, sem_before) for name in cfg.strategies
    }

    say(f"5/5 training {len(cfg.strategies)} strategies + stock DDP, {cfg.rounds} interleaved rounds (with profile steps and probes)")
    variants: dict[str, tuple] = {}
    for name, plan in plans.items():
        m = copy.deepcopy(base)
        variants[name] = (_step_fn(m, nn.parallel.DistributedDataParallel(m, **ddp_options(plan, m)), inputs, loss_fn, cfg.lr), plan)
    m = copy.deepcopy(base)
    variants[STOCK] = (_step_fn(m, nn.parallel.DistributedDataParallel(m), inputs, loss_fn, cfg.lr), None)
    times: dict[str, list[float]] = {k: [] for k in variants}
    light_before: dict[str, list[int]] = {k: [] for k in variants}  # per round, the light step run just before
    light_kept = 0
    probes = []
    # one untimed step of everything first (DDP rebuilds its buckets after it; allocations); after
    # that no warm-up between variants: the first step after a switch is a few percent slower for
    # every variant alike (measured on resnet18: 4%), and rounds short and many spread the machine's
    # slow and fast phases (seconds long here) evenly over the variants
    for step in [lambda: profile_steps.step(keep=False), *(v[0] for v in variants.values())]:
        dist.barrier()
        step()
    names = list(variants)
    for r in range(cfg.rounds):
        dist.barrier()
        for _ in range(cfg.steps):
            profile_steps.step(keep=True)
        probes.append(probe.sample())
        # a new random order every round (the same on every rank): a variant that always ran first
        # after the probe (whose long all-reduces drain the link's token bucket), always last, or
        # always after the same other variant would carry that position's cost. Measured, two
        # variants with the same buckets differed by 9% in medians with a fixed order, and still by
        # 4-10% with the order rotated each round, which keeps every variant's predecessor
        for name in random.Random(r).sample(names, len(names)):
            step = variants[name][0]
            dist.barrier()
            # the machine's speed just before the variant's steps: what pairs its prediction with
            # them (:func:`paired_error`); the machine moves speed within a round
            light_before[name].append(light_kept)
            profile_steps.light_step(keep=True)
            light_kept += 1
            dist.barrier()
            for _ in range(cfg.steps):
                times[name].append(step())
        if (r + 1) % max(1, cfg.rounds // 6) == 0 or r + 1 == cfg.rounds:
            say(f"  round {r + 1}/{cfg.rounds} done")
    # recorded steps (stock DDP with a StepRecorder): where the time went, per variant
    records: dict[str, list] = {}
    for name, (_, plan) in variants.items():
        m = copy.deepcopy(base)
        ddp = nn.parallel.DistributedDataParallel(m, **(ddp_options(plan, m) if plan is not None else {}))
        rec = StepRecorder(ddp, order=order.names)
        step = _step_fn(m, ddp, inputs, loss_fn, cfg.lr)
        for _ in range(1 + cfg.recorded_steps):  # the first builds DDP's buckets
            dist.barrier()
            step()
        records[name] = rec.records[1:]
    steps_table = ProfileSteps.of(order, _gather(profile_steps.take()), _gather(profile_steps.take_light()))
    probes_all = _pooled(_gather(probes))
    timelines = _gather({name: _measured_timeline(recs) for name, recs in records.items()})
    all_times = _gather(times)
    # iteration time of a synchronous step is the slowest rank's
    measured = {k: [max(ts[k][i] for ts in all_times) for i in range(len(times[k]))] for k in times}
    if rank != 0:
        return None

    profile = steps_table.profile()
    contention = probe.report(probes_all, cfg.resamples, threads)
    rows, semantics, cost_in_rounds = predictions(
        steps_table, probes_all, contention, cluster, plans, measured, cfg.steps, cfg.resamples, backend, threads, light_before
    )
    for name, row in rows.items():
        row["timeline"]["measured"] = {k: _max_or_none(t[name][k] for t in timelines) for k in timelines[0][name]}
    stock = rows.pop(STOCK)
    report = {
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "world_size": world,
        "backend": backend,
        "rounds": cfg.rounds,
        "steps_per_round": cfg.steps,
        "min_gain": cfg.min_gain,  # what optimal was asked to predict over stock DDP's buckets
        "profile": _profile_summary(profile),
        "profile_before_run": _profile_summary(profile_before),
        "cluster": cluster.to_json(),  # as measured before the rounds (what the plans were made from)
        "cluster_in_rounds": replace(cluster, allreduce=cost_in_rounds).to_json(),  # what predicts
        "fit": fit,
        "comm_samples": samples.to_json(),
        "semantics": semantics.to_json(),
        "semantics_before_run": sem_before.to_json(),
        "contention": contention,
        "contention_before_run": contention_before,
        "stock_ddp": stock,
        "strategies": rows,
        "plans": {name: plan_to_json(plan) for name, plan in plans.items()},
        # what the predictions were made from, so that they can be made again (another model, say)
        "raw": {
            "probes": probes_all,
            "profile_steps": {
                "forward_end_s": list(steps_table.forward_end_s),
                "ready_s": [list(r) for r in steps_table.ready_s],
                "optimizer_s": list(steps_table.optimizer_s),
                "finalize_s": list(steps_table.finalize_s),
                "backward_unrecorded_s": list(steps_table.backward_unrecorded_s),
                "light_before": light_before,
            },
        },
    }
    if "ddp" in rows:
        # the same buckets, expressed through caps: any difference is this machine's noise
        report["ddp_caps_vs_stock_ddp"] = 1 / rows["ddp"]["speedup_vs_stock_ddp"] - 1
    best = min(rows, key=lambda k: rows[k]["measured_s"])
    report["best_measured"] = best
    _write(report, records[best], profile, plans[best], replace(cluster, allreduce=cost_in_rounds), semantics, Path(cfg.out_dir))
    return report


def predictions(
    steps_table: ProfileSteps,
    probes: list[dict],
    contention: dict,
    cluster: ClusterSpec,
    plans: dict[str, Plan],
    measured: dict[str, list[float]],
    steps: int,
    resamples: int,
    backend: str,
    threads: int,
    light_before: dict[str, list[int]] | None = None,
) -> tuple[dict[str, dict], Semantics, Table]:
    """Every variant's prediction from the numbers measured in the rounds, against its measured
    steps: one row per plan and one for stock DDP's own buckets (under ``STOCK``), the semantics and
    the drifted cost table that predicted. ``contention`` is :func:`contention_of` over ``probes``;
    each plan carries its own prediction, made from the numbers before the rounds. ``light_before``:
    per variant, the light step run just before its steps in each round (:func:`paired_error`;
    without it, as in reports from before, the light step of each round's start)."""
    profile = steps_table.profile()
    ends_of = {name: ends_of_plan(profile, plan) for name, plan in plans.items()}
    ends_of[STOCK] = DDP().ends(profile, cluster.allreduce)  # stock DDP's own buckets
    # predictions use the table brought to the rounds' minutes (the plans were made from the table as measured)
    cost_in_rounds = drifted(cluster.allreduce, anchors_of(probes))
    semantics = measured_semantics(probes, contention, backend, profile, cost_in_rounds, steps_table.finalize())
    intervals = error_intervals(steps_table, probes, ends_of, cluster, measured, resamples, backend, threads)
    rounds = len(measured[STOCK]) // steps
    paired = {
        name: paired_error(
            steps_table, profile, ends, cost_in_rounds, semantics, measured[name], steps,
            light_before[name] if light_before else list(range(rounds)), resamples,
        )
        for name, ends in ends_of.items()
    }
    rows = {}
    for name, ends in ends_of.items():
        tl = simulate_run(profile, ends, cost_in_rounds, semantics)
        plain = simulate_run(profile, ends, cost_in_rounds, Semantics(semantics.backend, semantics.threads, semantics.concurrency_gain)).iteration_s  # no contention
        med = statistics.median(measured[name])
        ahead = plans[name].predicted.iteration_s if name in plans else None
        rows[name] = {
            "buckets": len(ends),
            "iteration_s": tl.iteration_s,
            "measured_s": med,
            "measured_min_s": min(measured[name]),
            "measured_max_s": max(measured[name]),
            "error": tl.iteration_s / med - 1,
            "error_ci95": list(intervals[name]),
            "predicted_before_run_s": ahead,
            "error_before_run": None if ahead is None else ahead / med - 1,
            **paired[name],
            "no_contention_s": plain,
            "error_no_contention": plain / med - 1,
            **paired_speedup(measured[STOCK], measured[name], steps, resamples),
            "steps_s": measured[name],  # every timed step (slowest rank), in run order
            "timeline": {
                "predicted": {
                    "backward_end_s": tl.compute_s,
                    "allreduce_end_s": tl.iteration_s - profile.optimizer_s,
                    "allreduce_busy_s": tl.comm_s,
                },
            },
        }
    return rows, semantics, cost_in_rounds


def profile_steps_of(report: dict, order: ModelProfile) -> ProfileSteps:
    """The profile steps a ``validate.json`` kept raw, with ``order`` (its run's ``profile.json``)
    for the tensors' names and bytes."""
    raw = report["raw"]["profile_steps"]
    return ProfileSteps(
        order, tuple(raw["forward_end_s"]), tuple(tuple(r) for r in raw["ready_s"]), tuple(raw["optimizer_s"]),
        tuple(raw.get("finalize_s", ())), tuple(raw.get("backward_unrecorded_s", ())),
    )


def repredict(report: dict, order: ModelProfile, resamples: int = 200) -> dict:
    """``report`` (a ``validate.json``) with its predictions made again by this code from the raw
    numbers it kept (profile steps, probes, the cost table, the plans, the measured steps); the
    measurements are unchanged. ``order`` gives the tensors' names and bytes in ready order
    (``profile.json`` of the same run). ``resamples`` also decides, as in the run, whether the
    concurrency gain and c2 are used (their bootstrap intervals): with a handful of resamples
    those decisions, and so the predictions, can differ from the run's."""
    from commsched.cost.cluster import cluster_from_json
    from commsched.io import plan_from_json

    steps_table = profile_steps_of(report, order)
    probes = report["raw"]["probes"]
    threads = report["contention"]["threads"]
    contention = contention_of(probes, resamples, threads)
    cluster = cluster_from_json(report["cluster"])
    plans = {name: plan_from_json(doc, where=name) for name, doc in report["plans"].items()}
    measured = {name: row["steps_s"] for name, row in report["strategies"].items()}
    measured[STOCK] = report["stock_ddp"]["steps_s"]
    rows, semantics, cost_in_rounds = predictions(
        steps_table, probes, contention, cluster, plans, measured, report["steps_per_round"], resamples, report["backend"], threads,
        report["raw"]["profile_steps"].get("light_before"),
    )
    old = {**report["strategies"], STOCK: report["stock_ddp"]}
    for name, row in rows.items():
        row["timeline"]["measured"] = old[name]["timeline"]["measured"]
    stock = rows.pop(STOCK)
    out = {**report, "strategies": rows, "stock_ddp": stock, "contention": {**report["contention"], **contention}, "semantics": semantics.to_json()}
    out["cluster_in_rounds"] = replace(cluster, allreduce=cost_in_rounds).to_json()
    return out


def paired_error(
    steps_table: ProfileSteps, profile: ModelProfile, ends: tuple[int, ...], cost: Table, semantics: Semantics,
    measured: list[float], steps: int, light: list[int], resamples: int, seed: int = 0,
) -> dict:
    """The prediction error paired in time, as :func:`paired_speedup` pairs speedups: per round, the
    run's profile with every compute time scaled by the machine's speed at that moment (the light
    step ``light[r]``, run just before the variant's steps, against the median light step),
    predicted and set over the variant's mean step in that round, minus 1 (``profile``: the run's,
    ``steps_table.profile()``, made once by the caller for every variant); the median over rounds,
    with a 95% bootstrap interval over rounds. The per-tensor shares, the cost table and the
    semantics are the whole run's: one round's are too few.

    Why: the machine's compute speed moves in phases of seconds to minutes (resnet18 at 2 Gbit/s,
    2026-11-24: steps at 0.6 of their speed for 7 rounds of 12; bert_small, 2026-11-25: steps of
    one variant 460-880 ms, slow and fast rounds), and the step time is not linear in the compute
    times (all-reduces overlap compute and do not slow alike), so the prediction from the median
    profile of a run with two phases is not the median of its steps: that error is the machine's,
    not the model's. The pooled ``error`` is kept beside this one.
    """
    rounds = min(len(measured) // steps, len(light))
    if rounds == 0:
        raise CommschedError(f"no whole round to pair: {len(measured)} measured steps, {steps} per round")
    if not steps_table.backward_unrecorded_s or max(light[:rounds]) >= len(steps_table.backward_unrecorded_s):
        raise CommschedError(f"light steps {light[:rounds]} not among the {len(steps_table.backward_unrecorded_s)} measured")
    typical = statistics.median(steps_table.backward_unrecorded_s)
    errors = []
    for r in range(rounds):
        speed = steps_table.backward_unrecorded_s[light[r]] / typical  # > 1: slower than usual
        at_speed = replace(
            profile, forward_s=profile.forward_s * speed, optimizer_s=profile.optimizer_s * speed,
            tensors=tuple(replace(t, backward_s=t.backward_s * speed) for t in profile.tensors),
        )
        errors.append(simulate_run(at_speed, ends, cost, semantics).iteration_s / statistics.fmean(measured[r * steps : (r + 1) * steps]) - 1)
    rng = random.Random(seed)
    lo, hi = _interval([statistics.median(errors[rng.randrange(rounds)] for _ in range(rounds)) for _ in range(max(1, resamples))])
    return {"error_paired": statistics.median(errors), "error_paired_ci95": [lo, hi], "error_per_round": errors}


def paired_speedup(stock: list[float], variant: list[float], steps: int, resamples: int, seed: int = 0) -> dict:
    """Speedup over stock DDP, paired by round: per round, stock's mean step over the variant's
    (both ran in that round, minutes apart at most), then the median over rounds, with a 95%
    bootstrap interval over rounds. Pairing takes out the machine's drift between rounds, which on
    this project's machines is larger than the differences being measured."""
    rounds = min(len(stock), len(variant)) // steps
    ratios = [
        statistics.fmean(stock[r * steps : (r + 1) * steps]) / statistics.fmean(variant[r * steps : (r + 1) * steps])
        for r in range(rounds)
    ]
    rng = random.Random(seed)
    lo, hi = _interval([statistics.median(ratios[rng.randrange(rounds)] for _ in range(rounds)) for _ in range(resamples)])
    return {
        "speedup_vs_stock_ddp": statistics.median(ratios),
        "speedup_ci95": [lo, hi],
        "speedup_of_medians": statistics.median(stock) / statistics.median(variant),
    }


def error_intervals(
    steps: ProfileSteps,
    probes: list[dict],
    ends_of: dict[str, tuple[int, ...]],
    cluster: ClusterSpec,
    measured: dict[str, list[float]],
    resamples: int,
    backend: str = "gloo",
    threads: int = 1,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """95% bootstrap intervals of each strategy's prediction error (predicted / measured - 1).

    Each resample draws, with replacement, the profile steps (the profile is made again from them),
    the probes (the semantics are fitted again, the cost table drifted again) and each strategy's
    measured steps, and predicts
    again: so the interval holds the noise of both sides of the comparison. Steps are resampled
    independently, which is not exact either way: the machine's slow phases (seconds long)
    correlate neighbouring steps, which narrows the interval, while resampling each side on its own
    ignores that interleaved variants share those phases, which widens it. The interval takes the
    same number of resamples off each end.
    """
    rng = random.Random(seed)
    k, p, q = len(steps.forward_end_s), len(probes), len(steps.backward_unrecorded_s)
    decided = contention_of(probes, resamples, threads)  # the point estimate's decisions (gain, c2)
    errors: dict[str, list[float]] = {name: [] for name in ends_of}
    for _ in range(resamples):
        steps_picked = [rng.randrange(k) for _ in range(k)]
        profile = steps.profile(steps_picked, [rng.randrange(q) for _ in range(q)] if q else None)
        pick = [probes[rng.randrange(p)] for _ in range(p)]
        cost = drifted(cluster.allreduce, anchors_of(pick))
        sem = measured_semantics(pick, contention_of(pick, 0, threads, decided=decided), backend, profile, cost, steps.finalize(steps_picked))
        for name, ends in ends_of.items():
            ts = measured[name]
            med = statistics.median(ts[rng.randrange(len(ts))] for _ in range(len(ts)))
            errors[name].append(simulate_run(profile, ends, cost, sem).iteration_s / med - 1)
    return {name: _interval(es) for name, es in errors.items()}


def _measured_timeline(records: list) -> dict:
    """Medians over a rank's recorded steps: end of backward, end of the last all-reduce, and the
    time all-reduces were in flight (seconds since the start of forward)."""
    if not records:
        return {"backward_end_s": None, "allreduce_end_s": None, "allreduce_busy_s": None}
    return {
        "backward_end_s": statistics.median(max(t for t in r.ready_s if t == t) for r in records),
        "allreduce_end_s": statistics.median(max(r.bucket_end_s) for r in records),
        "allreduce_busy_s": statistics.median(sum(e - s for s, e in zip(r.bucket_start_s, r.bucket_end_s)) for r in records),
    }


def _max_or_none(values) -> float | None:
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def _describe(sem: Semantics) -> str:
    two = f" ({sem.compute_slowdown_many:+.0%} under two)" if sem.threads > 1 else ""
    under = ", ".join(f"{_size(b)} x{f:.2f}" for b, f in sem.under_compute) or "x1"
    return (
        f"{sem.backend} ({sem.threads} thread{'s' if sem.threads > 1 else ''}, gain {sem.concurrency_gain:.2f}), "
        f"compute {sem.compute_slowdown:+.0%} under an all-reduce{two}, all-reduces under compute {under} "
        f"{_launched(sem)}, {sem.launch_compute_s * 1e6:.0f} us of compute per launch"
    )


def _launched(sem: Semantics) -> str:
    ratios = ", ".join(f"{_size(b)} x{r:.2f}" for b, r in sem.launch_factor_points)
    d = f", {sem.call_overhead_s * 1e6:+.0f} us per call" if sem.call_overhead_s else ""
    return f"(launched from backward: {ratios or 'x1'}{d})"


def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def _pooled(per_rank: list[list]) -> list:
    return [x for xs in per_rank for x in xs]


def _profile_summary(p: ModelProfile) -> dict:
    return {"forward_s": p.forward_s, "backward_s": p.backward_s, "optimizer_s": p.optimizer_s, "tensors": len(p.tensors), "bytes": p.total_bytes}


def _broadcast_obj(obj):
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _printer(enabled: bool):
    from rich.console import Console

    console = Console(stderr=True)

    def say(msg: str) -> None:
        if enabled:
            console.print(msg)

    return say


def _write(report: dict, records: list, profile: ModelProfile, plan: Plan, cluster: ClusterSpec, semantics: Semantics, out: Path) -> None:
    from commsched.io import profile_to_json, write_json
    from commsched.report.plots import gantt_png, validation_png
    from commsched.report.trace import chrome_trace

    out.mkdir(parents=True, exist_ok=True)
    if records:
        rec = records[-1]
        report["measured_breakdown"] = rec.breakdown()
        predicted = simulate_run(profile, ends_of_plan(profile, plan), cluster.allreduce, semantics)
        timelines = {f"{plan.strategy} measured": rec.timeline(), f"{plan.strategy} predicted": predicted}
        write_json(out / "measured-trace.json", chrome_trace(timelines))
        gantt_png(timelines, out / "measured-gantt.png", title=f"{report['model']}: measured vs predicted step ({plan.strategy}, stock DDP)")
    write_json(out / "profile.json", profile_to_json(profile))
    # what a user needs to plan this job again: `commsched plan --profile profile.json --cluster
    # cluster.json --runtime semantics.json`
    write_json(out / "cluster.json", cluster.to_json())
    write_json(out / "semantics.json", semantics.to_json())
    write_json(out / "validate.json", report)
    validation_png(report, out / "validate.png")
    from commsched.report.html import validate_section, write_report

    try:
        write_report(out / "validate-report.html", [validate_section(report, str(out / "validate.json"))])
    except CommschedError as e:  # the measurements are written; a page is not worth the run
        import sys

        print(f"note: validate-report.html not written: {e}", file=sys.stderr)


def paired_cell(row: dict) -> str:
    """A row's paired error and its interval as a table cell; "-" for reports from before it was
    measured (``repredict`` makes it)."""
    if "error_paired" not in row:
        return "-"
    lo, hi = row["error_paired_ci95"]
    return f"{row['error_paired']:+.1%} [{lo:+.1%}, {hi:+.1%}]"


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    sem = report["semantics"]
    t = RichTable(
        title=(
            f"{report['model']} (batch {report['batch_size']}) on {report['world_size']} ranks, {report['backend']}, "
            f"every plan run by stock DDP with its caps: predicted vs measured step time (median of "
            f"{report['rounds']} x {report['steps_per_round']}; {_describe(Semantics(**sem))})"
        ),
        title_justify="left",
    )
    for c in (
        "strategy", "buckets", "predicted ms", "measured ms [min, max]", "error [95% interval]", "error paired in time [95%]",
        "error, numbers before run", "speedup vs stock DDP [95%]",
    ):
        t.add_column(c, justify="left" if c == "strategy" else "right")
    for name, r in sorted(report["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
        t.add_row(
            name,
            str(r["buckets"]),
            f"{r['iteration_s'] * 1e3:.1f}",
            f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}]",
            f"{r['error']:+.1%} [{r['error_ci95'][0]:+.1%}, {r['error_ci95'][1]:+.1%}]",
            paired_cell(r),
            f"{r['error_before_run']:+.1%}",
            f"{r['speedup_vs_stock_ddp']:.3f}x [{r['speedup_ci95'][0]:.3f}, {r['speedup_ci95'][1]:.3f}]",
        )
    s = report["stock_ddp"]
    t.add_row(
        f"{STOCK} (defaults)", str(s["buckets"]), f"{s['iteration_s'] * 1e3:.1f}",
        f"{s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}]",
        f"{s['error']:+.1%} [{s['error_ci95'][0]:+.1%}, {s['error_ci95'][1]:+.1%}]", paired_cell(s), "-", "1.000x",
    )
    Console(width=170).print(t)
    errs = [abs(r["error"]) for r in report["strategies"].values()] + [abs(s["error"])]
    before = [abs(r["error_before_run"]) for r in report["strategies"].values()]
    paired = [abs(r["error_paired"]) for r in [*report["strategies"].values(), s] if "error_paired" in r]
    msg = (
        f"prediction error: median {statistics.median(errs):.1%}, worst {max(errs):.1%} "
        + (f"(paired in time: median {statistics.median(paired):.1%}, worst {max(paired):.1%}) " if paired else "")
        + 
        f"(from the numbers measured before the run: median {statistics.median(before):.1%}, worst {max(before):.1%})"
    )
    if "ddp_caps_vs_stock_ddp" in report:
        msg += f"; DDP's buckets through caps vs stock DDP's defaults: {report['ddp_caps_vs_stock_ddp']:+.1%}"
    Console(stderr=False).print(msg)
