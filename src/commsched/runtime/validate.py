"""Validate predictions against measurement on a real process group (run under torchrun).

Every rank, in lockstep:

1. measures the model's profile (forward, per-tensor backward, optimizer step) inside training
   steps whose only all-reduce follows backward, all ranks at once so the measurement sees the same
   CPU sharing as training, then averages it over ranks;
2. benchmarks all-reduce as the runtime issues it (:func:`bench_runtime_allreduce`: one bucket per
   message size, each launched by DataParallel when the previous completes) and fits a cluster model
   (alpha-beta or OSF Eq. 18) that predicts with; the barrier-separated benchmark of ``bench-comm``
   is run and fitted too, and reported beside it;
3. measures contention both ways: compute slowed by an all-reduce in flight, and an all-reduce slowed
   by compute, the simplest form of LIBRA's g(b, r) (:mod:`commsched.sim.contention`);
4. plans every strategy, and ``contended`` (:mod:`commsched.planners.contended`: planned for the
   measured contention), and predicts each one's iteration time, with and without contention;
5. trains with every strategy and with stock ``DistributedDataParallel``, interleaved round by round
   (A B C ... A B C ...), each from the same weights, and takes the median step time over rounds.

Rank 0 prints predicted vs measured with the error, and the measured speedup over stock DDP, and
writes ``validate.json``, ``validate.png``, the measured profile (``profile.json``) and the measured timeline of the best strategy
(``measured-trace.json``, ``measured-gantt.png``) to the output directory.
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
from commsched.errors import CommschedError
from commsched.cost.models import AlphaBeta
from commsched.planners import STRATEGIES, make_plan
from commsched.planners.base import plan_and_timeline
from commsched.planners.contended import Contended
from commsched.runtime.bench_comm import CommSamples
from commsched.sim.contention import simulate_contended
from commsched.sim.timeline import ends_of_plan
from commsched.types import ModelProfile, Plan, TensorSpec

STOCK = "torch-ddp"
CONTENDED = "contended"  # planned for the measured contention (commsched.planners.contended)
VALIDATE_STRATEGIES = (*STRATEGIES, CONTENDED)
_ZERO_COST = AlphaBeta(0.0, 0.0)  # a plan whose layout does not depend on costs (SyncEASGD) needs none


@dataclass(frozen=True)
class ValidationConfig:
    model: str
    batch_size: int
    image_size: int | None = None
    strategies: tuple[str, ...] = VALIDATE_STRATEGIES
    rounds: int = 5
    steps: int = 4  # timed steps per strategy per round, after one warm-up step
    profile_iters: int = 8
    comm_repeats: int = 7
    comm_steps: int = 12  # timed steps of the runtime all-reduce benchmark, after two warm-up steps
    lr: float = 0.01
    out_dir: str = "out/validate"


def _mean_profile(profiles: list[ModelProfile]) -> ModelProfile:
    """The element-wise mean over ranks (all ranks' orders must agree)."""
    first = profiles[0]
    for p in profiles[1:]:
        if p.names != first.names:
            raise CommschedError("ranks measured different gradient ready orders; is the model the same on every rank?")
    n = len(profiles)
    return replace(
        first,
        forward_s=sum(p.forward_s for p in profiles) / n,
        optimizer_s=sum(p.optimizer_s for p in profiles) / n,
        tensors=tuple(
            TensorSpec(t.name, t.bytes, sum(p.tensors[i].backward_s for p in profiles) / n)
            for i, t in enumerate(first.tensors)
        ),
    )


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


def _contention(model: nn.Module, inputs: tuple, loss_fn, cluster: ClusterSpec, iters: int) -> dict:
    """The two factors of :func:`~commsched.sim.contention.simulate_contended`, measured.

    compute_slowdown: forward+backward time with an all-reduce in flight throughout (a message whose
    all-reduce outlasts the compute) over its time alone, minus 1. comm_slowdown: the time of an
    all-reduce that runs entirely during compute (a message needing about a third of the compute
    time) over the same all-reduce alone, minus 1; its end is stamped by a completion callback, which
    can run a little late when it waits for the GIL, so comm_slowdown errs high if anything. Medians
    over ``iters``; both clipped at 0.
    """
    m = copy.deepcopy(model)

    def compute() -> float:
        t0 = time.perf_counter()
        loss_fn(m(*inputs)).backward()
        return time.perf_counter() - t0

    def allreduce_alone(t: torch.Tensor) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        return time.perf_counter() - t0

    compute()
    alone_t = [compute() for _ in range(3)]
    # message sizes must be the same on every rank: size them from the slowest rank's compute
    box = torch.tensor([statistics.median(alone_t)], dtype=torch.float64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    sizing = float(box.item())
    per_byte = max(cluster.allreduce.time_s(2**26) - cluster.allreduce.time_s(2**20), 1e-12) / (2**26 - 2**20)
    long_msg = torch.zeros(int(min(max(2.0 * sizing / per_byte, 2**20), 2**28)) // 4)
    short_msg = torch.zeros(int(min(max(sizing / 3 / per_byte, 2**16), 2**26)) // 4)
    # the four measurements interleaved (A B C D A B C D ...), so drift hits them alike
    alone_t, under_comm, comm_under_compute, comm_alone = [], [], [], []
    for _ in range(iters):
        dist.barrier()
        alone_t.append(compute())
        dist.barrier()
        work = dist.all_reduce(long_msg, async_op=True)
        under_comm.append(compute())
        work.wait()
        comm_alone.append(allreduce_alone(short_msg))
        dist.barrier()
        done: list[float] = []
        t0 = time.perf_counter()
        work = dist.all_reduce(short_msg, async_op=True)
        stamped = work.get_future().then(lambda _f: done.append(time.perf_counter()))
        compute()
        stamped.wait()  # the callback has run: its timestamp, not the end of compute, ends the all-reduce
        comm_under_compute.append(done[0] - t0)
    alone = statistics.median(alone_t)
    return {
        "compute_alone_s": alone,
        "compute_under_allreduce_s": statistics.median(under_comm),
        "compute_slowdown": max(0.0, statistics.median(under_comm) / alone - 1),
        "allreduce_alone_s": statistics.median(comm_alone),
        "allreduce_under_compute_s": statistics.median(comm_under_compute),
        "comm_slowdown": max(0.0, statistics.median(comm_under_compute) / statistics.median(comm_alone) - 1),
        "long_message_bytes": long_msg.numel() * 4,
        "short_message_bytes": short_msg.numel() * 4,
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


def _calibrate(order: ModelProfile, model: nn.Module, inputs: tuple, loss_fn, cfg: ValidationConfig) -> ModelProfile:
    """The compute profile as training sees it: steps of DataParallel with one all-reduce after
    backward (SyncEASGD's plan, so nothing overlaps the compute), recorded per tensor.

    A standalone profile (measure_profile) runs the same forward and backward, but not in the
    rhythm of training (optimizer step, fresh gradients and communication buffers every step); on
    this project's CPU machines that difference alone was 5-15% of the step. ``order`` gives the
    tensors in ready order (from the hooks); forward_s, backward_s and optimizer_s are medians over
    ``cfg.profile_iters`` steps after two warm-up steps.
    """
    from commsched.planners import SyncEASGD
    from commsched.runtime.data_parallel import DataParallel

    m = copy.deepcopy(model)
    plan = make_plan(SyncEASGD(), order, _ZERO_COST)
    dp = DataParallel(m, plan, record=True)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=cfg.lr, momentum=0.9)
    optimizer_s = []
    for _ in range(cfg.profile_iters + 2):
        opt.zero_grad(set_to_none=True)
        loss_fn(dp(*inputs)).backward()
        t0 = time.perf_counter()
        opt.step()
        optimizer_s.append(time.perf_counter() - t0)
    records = dp.records[2:]
    deltas = []
    for r in records:
        prev, row = r.forward_end_s, []
        for t in r.ready_s:
            row.append(max(0.0, t - prev))
            prev = max(prev, t)
        deltas.append(row)
    return replace(
        order,
        source="measured",
        forward_s=statistics.median(r.forward_end_s for r in records),
        optimizer_s=statistics.median(optimizer_s[2:]),
        tensors=tuple(
            TensorSpec(t.name, t.bytes, statistics.median(row[i] for row in deltas)) for i, t in enumerate(order.tensors)
        ),
    )


def run(cfg: ValidationConfig, progress: bool = True) -> dict | None:
    """The whole validation; returns the report on rank 0 (None elsewhere)."""
    from commsched.models.zoo import build_model, example_input, training_loss
    from commsched.profile.measure import measure_profile
    from commsched.runtime.bench_comm import bench_allreduce, fit_cluster
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
    order = measure_profile(base, inputs, loss_fn, name=cfg.model, batch_size=cfg.batch_size, warmup=1, iters=2)
    profile = _mean_profile(_gather(_calibrate(order, base, inputs, loss_fn, cfg)))

    say("2/5 benchmarking all-reduce: as the runtime chains buckets, and barrier-separated")
    # up to the largest bucket any plan can have (SyncEASGD's: every gradient), at most 256 MiB
    max_bytes = min(-(-profile.total_bytes // 4) * 4, 2**28)
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

    say("3/5 measuring compute slowdown under a concurrent all-reduce")
    contention = _contention(base, inputs, loss_fn, cluster, max(5, cfg.profile_iters))
    # every rank must plan with the same numbers: take rank 0's
    cluster, fit, contention, barrier_cluster, barrier_fit = _broadcast_obj(
        (cluster, fit, contention, barrier_cluster, barrier_fit)
    )

    say("4/5 planning and predicting every strategy")
    plans: dict[str, Plan] = {}
    predicted: dict[str, dict] = {}
    for name in cfg.strategies:
        chosen = (
            Contended(contention["compute_slowdown"], contention["comm_slowdown"]) if name == CONTENDED else STRATEGIES[name]
        )
        plan, tl = plan_and_timeline(chosen, profile, cluster.allreduce)
        plans[name] = plan
        contended = simulate_contended(
            profile, ends_of_plan(profile, plan), cluster.allreduce, contention["compute_slowdown"], contention["comm_slowdown"]
        )
        predicted[name] = {"iteration_s": contended.iteration_s, "no_contention_s": tl.iteration_s, "buckets": len(plan.buckets)}
    ddp_layout = plans.get("ddp")

    say(f"5/5 training {len(cfg.strategies)} strategies + stock DDP, {cfg.rounds} interleaved rounds")
    variants: dict[str, tuple] = {}
    for name, plan in plans.items():
        m = copy.deepcopy(base)
        dp = DataParallel(m, plan, record=True)
        variants[name] = (_step_fn(m, dp, inputs, loss_fn, cfg.lr)[0], dp)
    m = copy.deepcopy(base)
    stock = nn.parallel.DistributedDataParallel(m)
    variants[STOCK] = (_step_fn(m, stock, inputs, loss_fn, cfg.lr)[0], stock)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(cfg.rounds):
        for name, (step, _) in variants.items():
            dist.barrier()
            step()  # warm-up
            for _ in range(cfg.steps):
                times[name].append(step())
        say(f"  round {r + 1}/{cfg.rounds} done")
    # iteration time of a synchronous step is the slowest rank's
    all_times = _gather(times)
    measured = {k: [max(ts[k][i] for ts in all_times) for i in range(len(times[k]))] for k in times}
    if rank != 0:
        return None

    stock_med = statistics.median(measured[STOCK])
    rows = {}
    for name in cfg.strategies:
        med = statistics.median(measured[name])
        rows[name] = {
            **predicted[name],
            "measured_s": med,
            "measured_min_s": min(measured[name]),
            "measured_max_s": max(measured[name]),
            "error": predicted[name]["iteration_s"] / med - 1,
            "error_no_contention": predicted[name]["no_contention_s"] / med - 1,
            "speedup_vs_stock_ddp": stock_med / med,
        }
    report = {
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "world_size": world,
        "backend": dist.get_backend(),
        "rounds": cfg.rounds,
        "steps_per_round": cfg.steps,
        "profile": {"forward_s": profile.forward_s, "backward_s": profile.backward_s, "optimizer_s": profile.optimizer_s, "tensors": len(profile.tensors), "bytes": profile.total_bytes},
        "cluster": cluster.to_json(),
        "fit": fit,
        "comm_samples": runtime_samples.to_json(),
        "barrier_bench": {"cluster": barrier_cluster.to_json(), "fit": barrier_fit, "samples": barrier_samples.to_json()},
        "contention": contention,
        "stock_ddp": {"measured_s": stock_med, "measured_min_s": min(measured[STOCK]), "measured_max_s": max(measured[STOCK])},
        "strategies": rows,
    }
    if ddp_layout is not None:
        report["overhead_vs_stock_ddp"] = rows["ddp"]["measured_s"] / stock_med - 1
    best = min(rows, key=lambda k: rows[k]["measured_s"])
    report["best_measured"] = best
    _write(report, variants[best][1], profile, plans[best], cluster, contention, Path(cfg.out_dir))
    return report


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
    for c in ("strategy", "buckets", "predicted ms", "measured ms [min, max]", "error", "error w/o contention", "speedup vs stock DDP"):
        t.add_column(c, justify="left" if c == "strategy" else "right")
    for name, r in sorted(report["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
        t.add_row(
            name,
            str(r["buckets"]),
            f"{r['iteration_s'] * 1e3:.1f}",
            f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}]",
            f"{r['error']:+.1%}",
            f"{r['error_no_contention']:+.1%}",
            f"{r['speedup_vs_stock_ddp']:.3f}x",
        )
    s = report["stock_ddp"]
    t.add_row(STOCK, "-", "-", f"{s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}]", "-", "-", "1.000x")
    Console(width=160).print(t)
    errs = [abs(r["error"]) for r in report["strategies"].values()]
    msg = f"prediction error: median {statistics.median(errs):.1%}, worst {max(errs):.1%}"
    if "overhead_vs_stock_ddp" in report:
        msg += f"; commsched with DDP's buckets vs stock DDP: {report['overhead_vs_stock_ddp']:+.1%}"
    Console(stderr=False).print(msg)
