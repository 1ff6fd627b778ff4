"""Validate predictions against measurement on a real process group (run under torchrun).

Every rank, in lockstep:

1. measures the model's compute profile inside training steps whose only all-reduce follows
   backward (SyncEASGD's plan: nothing overlaps the compute), all ranks at once so the measurement
   sees the same CPU sharing as training. Per step, each tensor's ready time is the slowest rank's
   (a synchronous step waits for it); the profile is the median over steps;
2. benchmarks all-reduce as the runtime issues it (:func:`bench_runtime_allreduce`: one bucket per
   message size, each launched by DataParallel when the previous completes) and fits a cluster model
   (alpha-beta or OSF Eq. 18) that predicts with; the barrier-separated benchmark of ``bench-comm``
   is run and fitted too, and reported beside it;
3. measures contention both ways: compute slowed by an all-reduce in flight, and an all-reduce slowed
   by compute, the simplest form of LIBRA's g(b, r) (:mod:`commsched.sim.contention`);
4. plans every strategy; ``optimal`` is planned for the measured contention, within 1% of that
   optimum (:mod:`commsched.planners.optimal_contended`);
5. trains with every strategy and with stock ``DistributedDataParallel``, interleaved round by round
   (A B C ... A B C ...), each from the same weights. Each round also repeats steps 1 and 3 (the
   profile steps and the contention probes), so that what predicts and what is predicted are
   measured over the same minutes: on a shared machine whose speed drifts by 10-20% between minutes,
   a profile taken only before the run made every prediction of a run off by the same few percent.

Predictions are then made from the profile and contention measured in the rounds (the plans were
made from those measured before, as a user plans); the error of predictions from the numbers before
the run is reported beside them. Rank 0 prints predicted vs measured with the error, and the
measured speedup over stock DDP, and writes ``validate.json``, ``validate.png``, the measured profile
(``profile.json``) and the measured timeline of the best strategy (``measured-trace.json``,
``measured-gantt.png``) to the output directory.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import AlphaBeta
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES, Optimal, make_plan
from commsched.runtime.bench_comm import CommSamples
from commsched.sim.contention import simulate_contended
from commsched.sim.timeline import ends_of_plan, simulate
from commsched.types import ModelProfile, Plan, TensorSpec

STOCK = "torch-ddp"
_ZERO_COST = AlphaBeta(0.0, 0.0)  # a plan whose layout does not depend on costs (SyncEASGD) needs none


@dataclass(frozen=True)
class ValidationConfig:
    model: str
    batch_size: int
    image_size: int | None = None
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    rounds: int = 12
    steps: int = 2  # timed steps per strategy per round (one untimed step of each before round 1)
    profile_iters: int = 8  # profile steps before the run (for planning); each round repeats ``steps``
    contention_iters: int = 6  # contention probes before the run; each round repeats one
    resamples: int = 200  # bootstrap resamples for the errors' 95% intervals
    comm_repeats: int = 7
    comm_steps: int = 12  # timed steps of the runtime all-reduce benchmark, after two warm-up steps
    lr: float = 0.01
    out_dir: str = "out/validate"

    def __post_init__(self) -> None:
        for what in ("batch_size", "rounds", "steps", "profile_iters", "contention_iters", "resamples", "comm_repeats", "comm_steps"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CommschedError(f"validate {what} must be a positive integer, got {v!r}")


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

    return step, opt


class _ContentionProbe:
    """Measures the two factors of :func:`~commsched.sim.contention.simulate_contended`.

    One :meth:`sample` times, interleaved so that drift hits them alike: a backward pass alone; a
    backward pass with an all-reduce in flight throughout (a message whose all-reduce outlasts it); an
    all-reduce alone; and the same all-reduce run entirely during a backward pass (a message needing
    about a third of its time). Each forward runs first, untimed, and ranks meet at a barrier before
    the timed part, so both ranks start it together. Backward, not forward, is what the all-reduces
    of training overlap, so backward is what is timed (an earlier probe timed forward+backward, and
    its all-reduce mostly overlapped the forward). The long message is sized from the cluster fit to
    outlast the backward pass but capped at 256 MiB; a sample in which it ended first is counted
    (``long_message_ended_early`` in the report), since it understates compute_slowdown. The all-reduce's end is stamped by a completion
    callback, which can run a little late when it waits for the GIL, so comm_slowdown errs high if
    anything. :func:`contention_of` turns samples into the factors: ratios of medians, minus 1,
    clipped at 0. Message sizes are fixed at construction from the slowest rank's backward time, so
    they are the same on every rank (collective).
    """

    def __init__(self, model: nn.Module, inputs: tuple, loss_fn, cluster: ClusterSpec) -> None:
        self.model, self.inputs, self.loss_fn = copy.deepcopy(model), inputs, loss_fn
        self._backward(self._forward())
        box = torch.tensor([statistics.median(self._backward(self._forward()) for _ in range(3))], dtype=torch.float64)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        sizing = float(box.item())
        per_byte = max(cluster.allreduce.time_s(2**26) - cluster.allreduce.time_s(2**20), 1e-12) / (2**26 - 2**20)
        self.long_msg = torch.zeros(int(min(max(2.0 * sizing / per_byte, 2**20), 2**28)) // 4)
        self.short_msg = torch.zeros(int(min(max(sizing / 3 / per_byte, 2**16), 2**26)) // 4)
        self.ended_early = 0  # samples whose long all-reduce ended before the backward pass

    def _forward(self) -> torch.Tensor:
        return self.loss_fn(self.model(*self.inputs))

    def _backward(self, loss: torch.Tensor) -> float:
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    def sample(self) -> tuple[float, float, float, float]:
        """(backward alone, backward under an all-reduce, all-reduce alone, all-reduce under backward), seconds."""
        loss = self._forward()
        dist.barrier()
        alone = self._backward(loss)
        loss = self._forward()
        dist.barrier()
        work = dist.all_reduce(self.long_msg, async_op=True)
        under = self._backward(loss)
        self.ended_early += work.is_completed()
        work.wait()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(self.short_msg)
        comm_alone = time.perf_counter() - t0
        loss = self._forward()
        dist.barrier()
        done: list[float] = []
        t0 = time.perf_counter()
        work = dist.all_reduce(self.short_msg, async_op=True)
        stamped = work.get_future().then(lambda _f: done.append(time.perf_counter()))
        self._backward(loss)
        stamped.wait()  # the callback has run: its timestamp, not the end of backward, ends the all-reduce
        return alone, under, comm_alone, done[0] - t0

    def report(self, samples: list[tuple[float, float, float, float]]) -> dict:
        return {
            **contention_of(samples),
            "long_message_bytes": self.long_msg.numel() * 4,
            "short_message_bytes": self.short_msg.numel() * 4,
            "long_message_ended_early": self.ended_early,  # this rank's count so far
        }


def contention_of(samples: list[tuple[float, float, float, float]]) -> dict:
    """The contention factors from :meth:`_ContentionProbe.sample` tuples (of any ranks): ratios of medians."""
    alone, under, comm_alone, comm_under = (statistics.median(x) for x in zip(*samples))
    return {
        "compute_alone_s": alone,  # a backward pass
        "compute_under_allreduce_s": under,
        "compute_slowdown": max(0.0, under / alone - 1),
        "allreduce_alone_s": comm_alone,
        "allreduce_under_compute_s": comm_under,
        "comm_slowdown": max(0.0, comm_under / comm_alone - 1),
        "samples": len(samples),
    }


class _Messages(nn.Module):
    """One parameter per message size; every gradient is ready at once (d loss / d p = x)."""

    def __init__(self, sizes_bytes: tuple[int, ...]) -> None:
        super().__init__()
        self.messages = nn.ParameterList(nn.Parameter(torch.zeros(s // 4)) for s in sizes_bytes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(p.sum() for p in self.messages) * x


def bench_runtime_allreduce(sizes_bytes: tuple[int, ...], steps: int, warmup: int = 2) -> CommSamples:
    """All-reduce times as :class:`~commsched.runtime.data_parallel.DataParallel` sees them.

    Trains a module with one fp32 parameter per size under a WFBP plan (one bucket per parameter)
    and takes each bucket's recorded start-to-end time. The buckets run back to back the way the
    runtime chains them (on gloo the next is launched from the previous one's completion callback),
    which is the cost a plan's buckets pay in training. On this project's CPU machines that cost
    differs from ``bench-comm``'s barrier-separated single all-reduce: a gloo rank on one core
    sometimes answers a small message at once and sometimes after a scheduler tick of a few
    milliseconds, and which of the two a benchmark sees depends on how it waits, so a plan is
    predicted from the runtime's own rhythm.

    ``time_s`` holds, per size, the slowest rank's **mean** over ``steps`` steps (``statistic`` is
    ``"mean"``: the times are bimodal, and a sum of many buckets costs the mean, not the median);
    ``min_s``/``max_s`` the fastest and slowest single time on any rank. Every rank must call it
    with the same arguments; every rank gets the same samples.
    """
    from commsched.planners import WFBP
    from commsched.profile.measure import measure_profile
    from commsched.runtime.data_parallel import DataParallel

    sizes = tuple(sorted(set(sizes_bytes)))
    if not sizes or any(s <= 0 or s % 4 for s in sizes):
        raise CommschedError(f"runtime all-reduce sizes must be positive multiples of 4 bytes, got {list(sizes_bytes)}")
    module = _Messages(sizes)
    x = torch.ones(())
    order = measure_profile(module, (x,), lambda out: out, name="messages", batch_size=1, warmup=0, iters=1)
    dp = DataParallel(module, make_plan(WFBP(), order, _ZERO_COST), record=True)
    for _ in range(warmup + steps):
        for p in module.parameters():
            p.grad = None
        dp(x).backward()
    per_size: dict[int, list[float]] = {s: [] for s in sizes}
    for rec in dp.records[warmup:]:
        for b, start, end in zip(rec.bucket_bytes, rec.bucket_start_s, rec.bucket_end_s):
            per_size[b].append(end - start)
    combined = []
    for values, op in (
        ([statistics.fmean(per_size[s]) for s in sizes], dist.ReduceOp.MAX),
        ([min(per_size[s]) for s in sizes], dist.ReduceOp.MIN),
        ([max(per_size[s]) for s in sizes], dist.ReduceOp.MAX),
    ):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=op)
        combined.append(tuple(t.tolist()))
    return CommSamples(dist.get_backend(), dist.get_world_size(), sizes, *combined, statistic="mean")


class _ProfileSteps:
    """Training steps that measure the compute profile as training sees it: DataParallel with one
    all-reduce after backward (SyncEASGD's plan, so nothing overlaps the compute), recorded per tensor.

    A standalone profile (measure_profile) runs the same forward and backward, but not in the rhythm
    of training (optimizer step, fresh gradients and communication buffers every step); on this
    project's CPU machines that difference alone was 5-15% of the step. ``order`` gives the tensors
    in ready order (from the hooks). :meth:`step` runs one step and, with ``keep``, keeps its record
    and optimizer time; :meth:`take` hands over (and forgets) what was kept.
    """

    def __init__(self, order: ModelProfile, model: nn.Module, inputs: tuple, loss_fn, lr: float) -> None:
        from commsched.planners import SyncEASGD
        from commsched.runtime.data_parallel import DataParallel

        self.model = copy.deepcopy(model)
        self.dp = DataParallel(self.model, make_plan(SyncEASGD(), order, _ZERO_COST), record=True)
        self.opt = torch.optim.SGD([p for p in self.model.parameters() if p.requires_grad], lr=lr, momentum=0.9)
        self.inputs, self.loss_fn = inputs, loss_fn
        self._kept: list[tuple] = []

    def step(self, keep: bool) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(self.dp(*self.inputs)).backward()
        t0 = time.perf_counter()
        self.opt.step()
        optimizer_s = time.perf_counter() - t0
        if keep:
            self._kept.append((self.dp.records[-1], optimizer_s))
        self.dp.records.clear()

    def take(self) -> list[tuple]:
        kept, self._kept = self._kept, []
        return kept


@dataclass(frozen=True)
class ProfileSteps:
    """Per-step compute timings of :class:`_ProfileSteps`, combined over ranks.

    A synchronous step waits for its slowest rank, so per step the forward end, each tensor's ready
    time (since the start of forward) and the optimizer time are the maximum over ranks.
    """

    order: ModelProfile
    forward_end_s: tuple[float, ...]  # per step
    ready_s: tuple[tuple[float, ...], ...]  # per step, per tensor in ready order
    optimizer_s: tuple[float, ...]  # per step

    @classmethod
    def of(cls, order: ModelProfile, steps_by_rank: list[list[tuple]]) -> ProfileSteps:
        """From every rank's kept (StepRecord, optimizer_s) pairs (the same steps on each rank)."""
        n = min(len(steps) for steps in steps_by_rank)
        if n == 0:
            raise CommschedError("no profile steps were recorded")
        steps = [[rank[k] for rank in steps_by_rank] for k in range(n)]
        return cls(
            order,
            tuple(max(r.forward_end_s for r, _ in ranks) for ranks in steps),
            tuple(tuple(max(v) for v in zip(*(r.ready_s for r, _ in ranks))) for ranks in steps),
            tuple(max(o for _, o in ranks) for ranks in steps),
        )

    def profile(self, pick: list[int] | None = None) -> ModelProfile:
        """The profile of the steps in ``pick`` (default all): each time the median over steps, and
        ``backward_s`` the difference between consecutive ready times (clipped at 0)."""
        ks = range(len(self.forward_end_s)) if pick is None else pick
        forward_s = statistics.median(self.forward_end_s[k] for k in ks)
        tensors, prev = [], forward_s
        for i, t in enumerate(self.order.tensors):
            ready = statistics.median(self.ready_s[k][i] for k in ks)
            tensors.append(TensorSpec(t.name, t.bytes, max(0.0, ready - prev)))
            prev = max(prev, ready)
        return replace(
            self.order,
            source="measured",
            forward_s=forward_s,
            optimizer_s=statistics.median(self.optimizer_s[k] for k in ks),
            tensors=tuple(tensors),
        )


def run(cfg: ValidationConfig, progress: bool = True) -> dict | None:
    """The whole validation; returns the report on rank 0 (None elsewhere)."""
    from commsched.models.zoo import build_model, example_input, runs_on, training_loss
    from commsched.profile.measure import measure_profile
    from commsched.runtime.bench_comm import bench_allreduce, fit_cluster
    from commsched.io import plan_to_json
    from commsched.runtime.data_parallel import DataParallel

    if not dist.is_initialized():
        raise CommschedError("validate runs under torchrun (or an initialised process group)")
    rank, world = dist.get_rank(), dist.get_world_size()
    say = _printer(rank == 0 and progress)
    inputs = example_input(cfg.model, cfg.batch_size, cfg.image_size)

    def loss_fn(out):
        return training_loss(cfg.model, out)

    torch.manual_seed(0)
    base = build_model(cfg.model)

    say(f"1/5 measuring the profile of {cfg.model} on every rank, inside training steps")
    with runs_on(cfg.model, inputs):
        order = measure_profile(base, inputs, loss_fn, name=cfg.model, batch_size=cfg.batch_size, warmup=1, iters=2)
    profile_steps = _ProfileSteps(order, base, inputs, loss_fn, cfg.lr)
    for i in range(cfg.profile_iters + 2):
        profile_steps.step(keep=i >= 2)
    profile_before = ProfileSteps.of(order, _gather(profile_steps.take())).profile()

    say("2/5 benchmarking all-reduce: as the runtime chains buckets, and barrier-separated")
    # up to the largest bucket any plan can have (SyncEASGD's: every gradient), at most 256 MiB
    max_bytes = min(-(-profile_before.total_bytes // 4) * 4, 2**28)
    # powers of two all the way (not bench-comm's powers of four above 1 MiB): buckets of 1-16 MiB are
    # common, and with a gap there the piecewise fit's log piece once reached to 4 MiB and halved
    # the predicted time of every 2-4 MB bucket; the largest size dominates the cost of the run anyway
    sizes = tuple(1 << k for k in range(2, max_bytes.bit_length()) if 1 << k < max_bytes) + (max_bytes,)
    runtime_samples = bench_runtime_allreduce(sizes, cfg.comm_steps)
    cluster, fit = fit_cluster(runtime_samples, name=f"measured-{world}x-{dist.get_backend()}-runtime")
    cluster = replace(
        cluster,
        source=(
            f"measured by commsched validate: buckets of 4 B to {max_bytes} B chained by DataParallel "
            f"over {cfg.comm_steps} steps; " + cluster.source.split(": ", 1)[1]
        ),
    )
    barrier_samples = bench_allreduce(repeats=cfg.comm_repeats, max_bytes=max_bytes, progress=rank == 0 and progress)
    barrier_cluster, barrier_fit = fit_cluster(barrier_samples, name=f"measured-{world}x-{dist.get_backend()}")

    # every rank must size the probe's messages and plan with the same numbers: take rank 0's
    cluster, fit, barrier_cluster, barrier_fit = _broadcast_obj((cluster, fit, barrier_cluster, barrier_fit))

    say("3/5 measuring compute slowdown under a concurrent all-reduce")
    probe = _ContentionProbe(base, inputs, loss_fn, cluster)
    contention_before = probe.report(_pooled(_gather([probe.sample() for _ in range(cfg.contention_iters)])))

    say("4/5 planning every strategy (optimal for the measured contention)")
    slowdowns = (contention_before["compute_slowdown"], contention_before["comm_slowdown"])
    plans: dict[str, Plan] = {
        name: make_plan(Optimal(*slowdowns) if name == "optimal" else STRATEGIES[name], profile_before, cluster.allreduce)
        for name in cfg.strategies
    }
    # a plan's own prediction is the one it was made for: under the contention measured before the run
    plans = {
        name: replace(plan, predicted=simulate_contended(profile_before, ends_of_plan(profile_before, plan), cluster.allreduce, *slowdowns).prediction())
        for name, plan in plans.items()
    }

    say(f"5/5 training {len(cfg.strategies)} strategies + stock DDP, {cfg.rounds} interleaved rounds (with profile steps and contention probes)")
    variants: dict[str, tuple] = {}
    for name, plan in plans.items():
        m = copy.deepcopy(base)
        dp = DataParallel(m, plan, record=True)
        variants[name] = (_step_fn(m, dp, inputs, loss_fn, cfg.lr)[0], dp)
    m = copy.deepcopy(base)
    stock = nn.parallel.DistributedDataParallel(m)
    variants[STOCK] = (_step_fn(m, stock, inputs, loss_fn, cfg.lr)[0], stock)
    times: dict[str, list[float]] = {k: [] for k in variants}
    probes = []
    # one untimed step of everything first (allocations, first-touch of buffers); after that no
    # warm-up is needed between variants (measured: the first step after a switch is not slower), so
    # rounds are short and many, which spreads the machine's slow and fast phases (seconds long
    # here) evenly over the variants
    for step, _ in [(lambda: profile_steps.step(keep=False), None), *variants.values()]:
        dist.barrier()
        step()
    for r in range(cfg.rounds):
        dist.barrier()
        for _ in range(cfg.steps):
            profile_steps.step(keep=True)
        probes.append(probe.sample())
        for name, (step, _) in variants.items():
            dist.barrier()
            for _ in range(cfg.steps):
                times[name].append(step())
        if (r + 1) % max(1, cfg.rounds // 6) == 0 or r + 1 == cfg.rounds:
            say(f"  round {r + 1}/{cfg.rounds} done")
    steps_table = ProfileSteps.of(order, _gather(profile_steps.take()))
    profile = steps_table.profile()
    probes_all = _pooled(_gather(probes))
    contention = probe.report(probes_all)
    timelines = _gather({name: _measured_timeline(variants[name][1].records[1:]) for name in plans})
    # iteration time of a synchronous step is the slowest rank's
    all_times = _gather(times)
    measured = {k: [max(ts[k][i] for ts in all_times) for i in range(len(times[k]))] for k in times}
    if rank != 0:
        return None

    stock_med = statistics.median(measured[STOCK])
    ends_of = {name: ends_of_plan(profile, plans[name]) for name in cfg.strategies}
    intervals = error_intervals(steps_table, probes_all, ends_of, cluster, measured, cfg.resamples)
    rows = {}
    for name in cfg.strategies:
        ends = ends_of[name]
        before = plans[name].predicted.iteration_s  # under the profile and contention it was planned with
        tl = simulate_contended(profile, ends, cluster.allreduce, contention["compute_slowdown"], contention["comm_slowdown"])
        plain = simulate(profile, ends, cluster.allreduce).iteration_s
        med = statistics.median(measured[name])
        lo, hi = intervals[name]
        rows[name] = {
            "buckets": len(ends),
            "iteration_s": tl.iteration_s,
            "measured_s": med,
            "measured_min_s": min(measured[name]),
            "measured_max_s": max(measured[name]),
            "error": tl.iteration_s / med - 1,
            "error_ci95": [lo, hi],
            "predicted_before_run_s": before,
            "error_before_run": before / med - 1,
            "no_contention_s": plain,
            "error_no_contention": plain / med - 1,
            "speedup_vs_stock_ddp": stock_med / med,
            "steps_s": measured[name],  # every timed step (slowest rank), in run order
            # where the time went, predicted and measured (median over steps, slowest rank)
            "timeline": {
                "predicted": {
                    "backward_end_s": tl.compute_s,
                    "allreduce_end_s": tl.iteration_s - profile.optimizer_s,
                    "allreduce_busy_s": tl.comm_s,
                },
                "measured": {k: max(t[name][k] for t in timelines) for k in timelines[0][name]},
            },
        }
    report = {
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "world_size": world,
        "backend": dist.get_backend(),
        "rounds": cfg.rounds,
        "steps_per_round": cfg.steps,
        "profile": _profile_summary(profile),
        "profile_before_run": _profile_summary(profile_before),
        "cluster": cluster.to_json(),
        "fit": fit,
        "comm_samples": runtime_samples.to_json(),
        "barrier_bench": {"cluster": barrier_cluster.to_json(), "fit": barrier_fit, "samples": barrier_samples.to_json()},
        "contention": contention,
        "contention_before_run": contention_before,
        "stock_ddp": {
            "measured_s": stock_med,
            "measured_min_s": min(measured[STOCK]),
            "measured_max_s": max(measured[STOCK]),
            "steps_s": measured[STOCK],
        },
        "strategies": rows,
        "plans": {name: plan_to_json(plan) for name, plan in plans.items()},
    }
    if "ddp" in rows:
        report["overhead_vs_stock_ddp"] = rows["ddp"]["measured_s"] / stock_med - 1
    best = min(rows, key=lambda k: rows[k]["measured_s"])
    report["best_measured"] = best
    _write(report, variants[best][1], profile, plans[best], cluster, contention, Path(cfg.out_dir))
    return report


def error_intervals(
    steps: ProfileSteps,
    probes: list[tuple[float, float, float, float]],
    ends_of: dict[str, tuple[int, ...]],
    cluster: ClusterSpec,
    measured: dict[str, list[float]],
    resamples: int,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """95% bootstrap intervals of each strategy's prediction error (predicted / measured - 1).

    Each resample draws, with replacement, the profile steps (the profile is made again from them),
    the contention probes and each strategy's measured steps, and predicts again: so the interval
    holds the noise of both sides of the comparison. Steps are resampled independently, which is
    not exact either way: the machine's slow phases (seconds long) correlate neighbouring steps,
    which narrows the interval, while resampling each side on its own ignores that interleaved
    variants share those phases, which widens it. The interval takes the same number of resamples
    off each end.
    """
    import random

    rng = random.Random(seed)
    k, p = len(steps.forward_end_s), len(probes)
    errors: dict[str, list[float]] = {name: [] for name in ends_of}
    for _ in range(resamples):
        profile = steps.profile([rng.randrange(k) for _ in range(k)])
        c = contention_of([probes[rng.randrange(p)] for _ in range(p)])
        for name, ends in ends_of.items():
            ts = measured[name]
            med = statistics.median(ts[rng.randrange(len(ts))] for _ in range(len(ts)))
            pred = simulate_contended(profile, ends, cluster.allreduce, c["compute_slowdown"], c["comm_slowdown"]).iteration_s
            errors[name].append(pred / med - 1)
    out = {}
    for name, es in errors.items():
        es.sort()
        cut = int(0.025 * (len(es) - 1))
        out[name] = (es[cut], es[len(es) - 1 - cut])
    return out


def _measured_timeline(records: list) -> dict:
    """Medians over a rank's recorded steps: end of backward, end of the last all-reduce, and the
    time all-reduces were in flight (seconds since the start of forward)."""
    return {
        "backward_end_s": statistics.median(max(t for t in r.ready_s if t == t) for r in records),
        "allreduce_end_s": statistics.median(max(r.bucket_end_s) for r in records),
        "allreduce_busy_s": statistics.median(sum(e - s for s, e in zip(r.bucket_start_s, r.bucket_end_s)) for r in records),
    }


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


def _write(report: dict, dp, profile: ModelProfile, plan: Plan, cluster: ClusterSpec, contention: dict, out: Path) -> None:
    from commsched.io import profile_to_json, write_json
    from commsched.report.plots import gantt_png, validation_png
    from commsched.report.trace import chrome_trace

    out.mkdir(parents=True, exist_ok=True)
    rec = dp.records[-1] if dp.records else None
    if rec is not None:
        report["measured_breakdown"] = rec.breakdown()
        predicted = simulate_contended(
            profile, ends_of_plan(profile, plan), cluster.allreduce, contention["compute_slowdown"], contention["comm_slowdown"]
        )
        timelines = {f"{plan.strategy} measured": rec.timeline(), f"{plan.strategy} predicted": predicted}
        write_json(out / "measured-trace.json", chrome_trace(timelines))
        gantt_png(timelines, out / "measured-gantt.png", title=f"{report['model']}: measured vs predicted step ({plan.strategy})")
    write_json(out / "profile.json", profile_to_json(profile))
    write_json(out / "validate.json", report)
    validation_png(report, out / "validate.png")


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=(
            f"{report['model']} (batch {report['batch_size']}) on {report['world_size']} ranks, {report['backend']}: "
            f"predicted vs measured step time (median of {report['rounds']} x {report['steps_per_round']}; "
            f"contention: compute {report['contention']['compute_slowdown']:+.0%} under all-reduce, "
            f"all-reduce {report['contention']['comm_slowdown']:+.0%} under compute)"
        ),
        title_justify="left",
    )
    for c in ("strategy", "buckets", "predicted ms", "measured ms [min, max]", "error [95% interval]", "error, numbers before run", "error w/o contention", "speedup vs stock DDP"):
        t.add_column(c, justify="left" if c == "strategy" else "right")
    for name, r in sorted(report["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
        t.add_row(
            name,
            str(r["buckets"]),
            f"{r['iteration_s'] * 1e3:.1f}",
            f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}]",
            f"{r['error']:+.1%} [{r['error_ci95'][0]:+.1%}, {r['error_ci95'][1]:+.1%}]",
            f"{r['error_before_run']:+.1%}",
            f"{r['error_no_contention']:+.1%}",
            f"{r['speedup_vs_stock_ddp']:.3f}x",
        )
    s = report["stock_ddp"]
    t.add_row(STOCK, "-", "-", f"{s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}]", "-", "-", "-", "1.000x")
    Console(width=160).print(t)
    errs = [abs(r["error"]) for r in report["strategies"].values()]
    before = [abs(r["error_before_run"]) for r in report["strategies"].values()]
    msg = (
        f"prediction error: median {statistics.median(errs):.1%}, worst {max(errs):.1%} "
        f"(from the profile and contention measured before the run: median {statistics.median(before):.1%}, worst {max(before):.1%})"
    )
    if "overhead_vs_stock_ddp" in report:
        msg += f"; commsched with DDP's buckets vs stock DDP: {report['overhead_vs_stock_ddp']:+.1%}"
    Console(stderr=False).print(msg)
