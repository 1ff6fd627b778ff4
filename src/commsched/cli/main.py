"""The ``commsched`` command line: parse arguments, make one library call, write files.

Every user error is a :class:`CommschedError`, printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from commsched.errors import CommschedError

DEFAULT_MODEL = "resnet50"
# the default is commsched.planners.MIN_GAIN_OVER_DDP (a test checks the text), read only when used:
# the CLI imports nothing heavy at start-up
MIN_GAIN_HELP = (
    "The recommendation (what to run, and the plan written) is stock DDP's default buckets unless a plan "
    "is predicted at least this fraction faster than them: its iteration at most (1 - G) times theirs "
    "(default 0.03: the prediction error measured on the emulated cluster; 0: the fastest plan). "
    "The optimal row is always the optimum."
)
DEFAULT_BATCH = 32
DEFAULT_DEVICE = "V100"

_DTYPE_OPTION = click.option(
    "--dtype", type=click.Choice(["fp32", "fp16", "bf16"]), default=None,
    help="Gradient element type of estimated profiles: bytes = elements x 4 or 2 (default: the model's, fp32).",
)


def _err_console():
    from rich.console import Console

    return Console(stderr=True)


def _split(values: Sequence[str]) -> list[str]:
    """Comma-separated or repeated values, duplicates dropped (first occurrence kept)."""
    out: list[str] = []
    for v in (v.strip() for item in values for v in item.split(",")):
        if v and v not in out:
            out.append(v)
    return out


def _bounded(
    what: str, value: float | None, upper: float, upper_text: str, *, lower: float = 0, strict: bool = True, lower_text: str = ""
) -> None:
    """An option's value in (lower, upper] (or [lower, upper] when not ``strict``); None is unset.

    click gives ints of any size (``--workers`` followed by 400 digits) and floats that are nan or inf
    (``1e400``); the bounds are those of :mod:`commsched.types` (see the README's error list)."""
    if value is None:
        return
    from commsched.types import shown, too_big_int

    if too_big_int(value) and value > 0:
        raise CommschedError(f"{what} must be at most {upper_text}, got {shown(value)}")
    if too_big_int(value) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number, got {shown(value)}")
    if value < lower or (strict and value == lower):
        raise CommschedError(f"{what} must be {'>' if strict else '>='} {lower_text or format(lower, 'g')}, got {shown(value)}")
    if value > upper:
        raise CommschedError(f"{what} must be at most {upper_text}, got {shown(value)}")


def _check_model_inputs(batch_size: int | None, image_size: int | None, efficiency: float | None = None) -> None:
    from commsched.types import MAX_BATCH_SIZE, MAX_IMAGE_SIZE

    _bounded("--batch-size", batch_size, MAX_BATCH_SIZE, "2**24 (16,777,216) samples per worker")
    _bounded("--image-size", image_size, MAX_IMAGE_SIZE, f"{MAX_IMAGE_SIZE} pixels")
    _bounded("--efficiency", efficiency, 1.0, "1 (the device's peak FLOP/s)")


# --- inputs ------------------------------------------------------------------------------------


def _zoo_profile(model: str, batch_size: int, device: str, image_size: int | None, efficiency: float | None, dtype: str | None = None):
    from commsched.devices import device as lookup_device

    lookup_device(device)  # fail on a bad name before building a model
    from commsched.models.zoo import ZOO_MODELS

    if model not in ZOO_MODELS:
        raise CommschedError(f"unknown model {model!r}; choose from {', '.join(ZOO_MODELS)}")
    with _err_console().status(f"profiling {model} on the CPU (FLOPs and gradient ready order)"):
        from commsched.profile.zoo_profile import zoo_profile

        return zoo_profile(model, batch_size, device, image_size=image_size, efficiency=efficiency, dtype=dtype)


def _profiles(
    profile_paths: Sequence[str], models: Sequence[str], batch_size: int, device: str, image_size, efficiency,
    dtype: str | None = None,
) -> dict:
    from commsched.io import load_profile

    _check_model_inputs(batch_size, image_size, efficiency)
    if dtype is not None and not models:
        raise CommschedError(f"--dtype {dtype} sets the gradient bytes of estimated zoo profiles; a profile file carries its own bytes")
    out = {}
    for path in profile_paths:
        p = load_profile(path)
        out[p.model if p.model not in out else f"{p.model} ({path})"] = p
    for m in models:
        out[m if m not in out else f"{m} (zoo)"] = _zoo_profile(m, batch_size, device, image_size, efficiency, dtype)
    return out


def _cluster(spec: str, workers: int | None, algorithm: str | None):
    from commsched.cost.cluster import PRESETS, preset
    from commsched.io import load_cluster

    c = PRESETS[spec] if spec in PRESETS else load_cluster(spec) if (spec.endswith(".json") or Path(spec).is_file()) else preset(spec)
    if algorithm:
        c = c.with_algorithm(algorithm)
    if workers is not None:
        from commsched.types import MAX_WORKERS

        _bounded("--workers", workers, MAX_WORKERS, "2**20 (1,048,576)")
        c = c.with_workers(workers)
    return c


def _planners(
    names: Sequence[str], bucket_mb: float | None, hvd_threshold_mb: float | None, hvd_cycle_ms: float | None, resources: bool = False,
):
    """The named planners (default: every strategy, and the resource ones on a cluster with ``resources``)."""
    from dataclasses import replace

    from commsched.planners import DDP, RESOURCE_STRATEGIES, STRATEGIES, Horovod, planner
    from commsched.planners.ddp import MIB, ddp_with_cap

    from commsched.types import MAX_BYTES, MAX_SECONDS

    _bounded("--bucket-mb", bucket_mb, MAX_BYTES / MIB, "2**30 MiB (1 PiB)")
    _bounded("--horovod-threshold-mb", hvd_threshold_mb, MAX_BYTES / MIB, "2**30 MiB (1 PiB)", strict=False)
    # 1 ns: below any event loop's resolution; the cycle simulation's tick arithmetic also needs a
    # cycle far above float resolution at the end of the longest timeline (1.2e-10 s at 1e6 s)
    _bounded("--horovod-cycle-ms", hvd_cycle_ms, MAX_SECONDS * 1e3, f"{MAX_SECONDS * 1e3:g} ms", lower=1e-6, strict=False, lower_text="1e-06 ms (1 ns)")
    chosen = [planner(n) for n in (_split(names) or [*STRATEGIES, *(RESOURCE_STRATEGIES if resources else ())])]
    out = []
    for p in chosen:
        if isinstance(p, DDP) and bucket_mb is not None:
            p = replace(ddp_with_cap(bucket_mb), name=p.name)
        if isinstance(p, Horovod):
            if hvd_threshold_mb is not None:
                p = replace(p, threshold_bytes=int(hvd_threshold_mb * MIB))
            if hvd_cycle_ms is not None:
                p = replace(p, cycle_s=hvd_cycle_ms / 1e3)
        out.append(p)
    return out


# --- commands ----------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="commsched")
def cli() -> None:
    """Plan, simulate and compare the gradient all-reduce schedule of data-parallel training."""


@cli.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Zoo model (see `commsched presets`).")
@click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int, help="Per-worker batch.")
@click.option(
    "--device", default=DEFAULT_DEVICE, show_default=True,
    help="GPU preset for the estimate; with --measure, where to measure: cpu, cuda or cuda:N (default: cuda if there is one, else cpu).",
)
@click.option("--image-size", type=int, default=None, help="Input resolution (default 224, 299 for inception_v3).")
@click.option("--efficiency", type=float, default=None, help="Fraction of peak FLOP/s reached (default: calibrated).")
@click.option("--measure", is_flag=True, help="Time real training steps on this machine (its GPU if it has one) instead of estimating.")
@click.option("--iters", type=int, default=10, show_default=True, help="Timed steps with --measure.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Untimed steps with --measure.")
@click.option("--sequential", is_flag=True, help="With --measure: synchronise the device after every gradient (MG-WFBP 5.1).")
@click.option("--from-trace", "trace_path", default=None, help="Measured profile from a torch.profiler Chrome trace of your job; with --model (and --batch-size) its gradients get the zoo model's names, without one they are named by position and shape.")
@click.option("--cluster-out", default=None, help="With --from-trace: cluster JSON of the trace's all-reduces (default: <out>-cluster.json).")
@_DTYPE_OPTION
@click.option("--out", "out_path", required=True, help="Profile JSON to write.")
def profile(model, batch_size, device, image_size, efficiency, measure, iters, warmup, sequential, trace_path, cluster_out, out_path, dtype=None) -> None:
    """Profile a zoo model: gradient tensors in ready order, bytes, backward times (estimated or measured)."""
    from commsched.io import profile_to_json, write_json
    from commsched.types import MAX_STEPS

    _check_model_inputs(batch_size, image_size, efficiency)
    if cluster_out is not None and trace_path is None:
        raise CommschedError("--cluster-out goes with --from-trace (the cluster is the trace's all-reduces)")
    if dtype is not None and (measure or trace_path is not None):
        raise CommschedError("--dtype sets the gradient bytes of estimated profiles; a measured one has the model's own")
    if trace_path is not None:
        if measure:
            raise CommschedError("--from-trace and --measure are exclusive: the trace is the measurement")
        _profile_from_trace(trace_path, model, batch_size, device, image_size, cluster_out, out_path)
        return
    if measure:
        _bounded("--iters", iters, MAX_STEPS, f"{MAX_STEPS:,}")
        _bounded("--warmup", warmup, MAX_STEPS, f"{MAX_STEPS:,}", strict=False)
        from commsched.models.zoo import ZOO_MODELS

        if model not in ZOO_MODELS:
            raise CommschedError(f"unknown model {model!r}; choose from {', '.join(ZOO_MODELS)}")
        from click.core import ParameterSource

        from commsched.profile.measure import measure_zoo_profile

        given = click.get_current_context().get_parameter_source("device") is not ParameterSource.DEFAULT
        p = measure_zoo_profile(
            model, batch_size, image_size, device=device if given else None, warmup=warmup, iters=iters,
            sequential=sequential, progress=True,
        )
    else:
        p = _profiles([], [model], batch_size, device, image_size, efficiency, dtype)[model]
    write_json(out_path, profile_to_json(p))
    click.echo(
        f"{p.model}: {len(p.tensors)} gradient tensors, {p.total_bytes / 2**20:.1f} MiB, "
        f"forward {p.forward_s * 1e3:.1f} ms, backward {p.backward_s * 1e3:.1f} ms on {p.device} -> {out_path}",
        err=True,
    )


def _profile_from_trace(trace_path, model, batch_size, device, image_size, cluster_out, out_path) -> None:
    """``profile --from-trace``: match the trace to zoo model ``model`` (given with ``--model``), else name
    its gradients by position and shape (``trace_params``); write the profile and, when the trace
    all-reduced at two sizes or more, the table cluster. Everything is computed before any write."""
    from click.core import ParameterSource

    from commsched.io import profile_to_json, write_json
    from commsched.models.names import ZOO_MODELS  # torch-free: a bad trace fails before torch loads
    from commsched.profile.from_trace import cluster_doc, load_trace, parse_trace, profile_from_trace, zoo_params

    ctx = click.get_current_context()
    for opt, param in (("--efficiency", "efficiency"), ("--iters", "iters"), ("--warmup", "warmup"), ("--sequential", "sequential")):
        if ctx.get_parameter_source(param) is not ParameterSource.DEFAULT:
            raise CommschedError(f"{opt} does not apply to --from-trace: the trace's own steps are the measurement")
    # the trace names neither the model nor the batch: their defaults would silently mislabel it
    with_model = ctx.get_parameter_source("model") is not ParameterSource.DEFAULT
    with_batch = ctx.get_parameter_source("batch_size") is not ParameterSource.DEFAULT
    if with_model and not with_batch:
        raise CommschedError("--from-trace needs --batch-size with --model: the trace does not say which batch it ran")
    if not with_model and image_size is not None:
        raise CommschedError("--image-size goes with --model: without a model the gradients' shapes come from the trace")
    if with_model and model not in ZOO_MODELS:
        raise CommschedError(f"unknown model {model!r}; choose from {', '.join(ZOO_MODELS)}")
    trace = parse_trace(load_trace(trace_path), str(trace_path))
    label = device if ctx.get_parameter_source("device") is not ParameterSource.DEFAULT else None
    # without --model: the profile is named after the trace file (rank-0.pt.trace.json.gz -> rank-0)
    name = model if with_model else Path(trace_path).name.removesuffix(".gz").removesuffix(".json").removesuffix(".pt.trace")
    r = profile_from_trace(trace, zoo_params(model, image_size) if with_model else None, model=name or "trace",
                           batch_size=batch_size if with_batch else 1, device=label, trace_name=Path(trace_path).name)
    cdoc = cluster_doc(r)
    cpath = cluster_out or str(Path(out_path).with_name(Path(out_path).stem + "-cluster.json"))
    write_json(out_path, profile_to_json(r.profile))
    if cdoc is not None:
        write_json(cpath, cdoc)
    p, m = r.profile, r.match
    click.echo(
        f"{p.model}: {len(p.tensors)} gradient tensors, {p.total_bytes / 2**20:.1f} MiB, forward {p.forward_s * 1e3:.1f} ms, "
        f"backward {p.backward_s * 1e3:.1f} ms on {p.device}, median of {r.steps} steps ({r.clock} clock); "
        + (f"{m.by_unique_shape} matched by a unique shape, {m.by_order} by order among same-shaped" if with_model
           else f"{m.by_position} named by position and shape (no --model)")
        + f" -> {out_path}",
        err=True,
    )
    if cdoc is not None:
        click.echo(
            f"all-reduce table: {cdoc['workers']} workers, {len(cdoc['samples'])} sizes from {cdoc['time_source']} "
            f"durations -> {cpath}",
            err=True,
        )
    for note in r.notes:
        click.echo(f"note: {note}", err=True)
    if not with_batch:
        click.echo("note: no --batch-size: the profile records batch 1, a label only (its times are the traced steps' own)", err=True)


def _strategy_options(f):
    for opt in reversed(
        [
            click.option("--profile", "profile_paths", multiple=True, help="Profile JSON (commsched.profile/v1)."),
            click.option("--model", "models", multiple=True, help=f"Zoo model to profile (default {DEFAULT_MODEL})."),
            click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int),
            click.option("--device", default=None, help=f"GPU for estimated profiles (default: the cluster's, else {DEFAULT_DEVICE})."),
            click.option("--image-size", type=int, default=None),
            click.option("--efficiency", type=float, default=None),
            _DTYPE_OPTION,
            click.option("--cluster", "cluster_spec", default="v100-10gbe", show_default=True, help="Preset name or cluster JSON."),
            click.option("--strategy", "strategies", multiple=True, help="Strategy (repeat or comma-separate; default all)."),
            click.option("--bucket-mb", type=float, default=None, help="Bucket cap of the ddp strategy, MiB (default 25)."),
            click.option("--horovod-threshold-mb", type=float, default=None, help="Fusion threshold of the horovod strategies, MiB."),
            click.option("--horovod-cycle-ms", type=float, default=None, help="Cycle time of the horovod strategies, ms."),
        ]
    ):
        f = opt(f)
    return f


@cli.command()
@_strategy_options
@click.option("--workers", type=int, default=None, help="Worker count (rescales a cluster given by link parameters).")
@click.option("--algorithm", default=None, help="All-reduce algorithm (ring, tree, double_binary_tree, ...).")
@click.option(
    "--runtime", "runtime_spec", default="nccl", show_default=True,
    help="Execution semantics of the runtime that runs the plan: nccl, gloo, or a semantics JSON (validate writes one).",
)
@click.option("--min-gain", type=float, default=None, help=MIN_GAIN_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print {strategies, best, recommended} as one JSON document on stdout (best: the fastest; recommended: what to run).")
@click.option("--out", "out_dir", default=None, help="Directory for plan.json, ddp_options.json, trace.json, gantt.png (default out/).")
def plan(
    profile_paths, models, batch_size, device, image_size, efficiency, dtype, cluster_spec, strategies, bucket_mb,
    horovod_threshold_mb, horovod_cycle_ms, workers, algorithm, runtime_spec, min_gain, as_json, out_dir,
) -> None:
    """Plan one model with every strategy; compare predicted iteration times; write the recommended plan."""
    from commsched.compare import compare
    from commsched.io import plan_to_json

    if len(profile_paths) + len(models) > 1:
        raise CommschedError("plan takes one model: give either one --profile or one --model")
    cluster = _cluster(cluster_spec, workers, algorithm)
    from commsched.planners import MIN_GAIN_OVER_DDP
    from commsched.planners.optimal import check_min_gain

    min_gain = MIN_GAIN_OVER_DDP if min_gain is None else min_gain
    check_min_gain(min_gain, "--min-gain")
    planners = _planners(strategies, bucket_mb, horovod_threshold_mb, horovod_cycle_ms, cluster.resources is not None)
    device = device or cluster.device or DEFAULT_DEVICE
    profiles = _profiles(profile_paths, models or ([] if profile_paths else [DEFAULT_MODEL]), batch_size, device, image_size, efficiency, dtype)
    (prof,) = profiles.values()
    from commsched.io import dumps

    cmp = compare(prof, cluster, planners, _semantics(runtime_spec), min_gain)
    rec = cmp.recommended
    doc = (
        {
            "strategies": {k: plan_to_json(r.plan) for k, r in cmp.results.items()},
            "best": cmp.best,  # the fastest predicted
            "recommended": {**rec.to_json(), "plan": plan_to_json(cmp.result(rec.strategy).plan)},  # what to run
        }
        if as_json
        else None
    )
    text = dumps(doc, "plan --json", indent=2) if as_json else None
    # Every file, plot included, is written before anything is printed: a failure (an unwritable
    # directory, a full disk) is then one error line with nothing on stdout, never a table followed
    # by an error. The plot's inputs are checked before it draws (report.plots), so only the file
    # system can fail it.
    out = None if (out_dir is None and as_json) else Path(out_dir or "out")
    if out is not None:
        _write_plan_outputs(cmp, out)
    if as_json:
        click.echo(text)
    else:
        _print_comparison(cmp)
    if out is not None:
        click.echo(f"recommended: {rec.strategy}; wrote {out}/plan.json, {out}/ddp_options.json, {out}/trace.json, {out}/gantt.png, {out}/report.html", err=True)


def _print_comparison(cmp) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    p, c = cmp.profile, cmp.cluster
    t = Table(
        # names from files are text, not rich markup: a cluster called "[/x]" must not fail the table
        title=escape(
            f"{p.model} (batch {p.batch_size}, {p.device}, {p.source}) on {c.name}: {c.workers} workers, "
            f"all-reduce {getattr(c.allreduce, 'algorithm', None) or c.allreduce.to_json()['model']}"
            + (f" ({c.workers // c.gpus_per_node} nodes x {c.gpus_per_node} GPUs)" if c.gpus_per_node else "")
            + f", runtime {_describe_semantics(cmp.semantics)}"
            + (
                f", resources per all-reduce ({c.resources.contention.kind} contention model, default {c.resources.label(c.resources.default)}"
                + (f", stock NCCL {c.resources.nccl.algorithm}: blocks are a cap, small all-reduces run on fewer)" if c.resources.nccl else ")")
                if c.resources is not None
                else ""
            )
        ),
        title_justify="left",
    )
    cols = ["strategy", "iteration ms", "compute ms", "non-overlapped comm ms", "scaling factor", "buckets", "speedup vs DDP"]
    if c.resources is not None:
        cols.append("resources")
    for col in cols:
        t.add_column(col, justify="left" if col == "strategy" else "right")
    rec = cmp.recommended
    for name, r in sorted(cmp.rows.items(), key=lambda kv: kv[1].timeline.iteration_s):
        tl = r.timeline
        t.add_row(
            f"[bold]{escape(name)} *[/bold]" if name == rec.strategy else escape(name),
            f"{tl.iteration_s * 1e3:.2f}",
            f"{tl.compute_s * 1e3:.2f}",
            f"{tl.non_overlapped_comm_s * 1e3:.2f}",
            f"{r.scaling_factor:.3f}",
            str(len(r.plan.buckets)),
            f"{r.speedup_vs_ddp:.3f}x",
            *([_resources_short(r.plan, c.resources)] if c.resources is not None else []),
        )
    t.caption = escape(f"* recommended (what to run): {rec.strategy}, {rec.reason}")
    t.caption_justify = "left"
    Console(width=max(120, Console().width)).print(t)


def _resources_short(plan, resources) -> str:
    """A plan's configs in short: one config for every bucket (e.g. ``1x256``; on stock NCCL with what
    NCCL launches for it, ``2x256 (NCCL runs 2x288)``), or ``mixed``."""
    shorts = {resources.label(resources.config_of(b.resources)) for b in plan.buckets}
    if len(shorts) > 1:
        return "mixed"
    (one,) = shorts
    return one


def _semantics(spec: str):
    from commsched.io import read_json
    from commsched.sim.semantics import GLOO, NCCL, semantics_from_json

    if spec in ("nccl", "gloo"):
        return NCCL if spec == "nccl" else GLOO
    if spec.endswith(".json") or Path(spec).is_file():
        from commsched.calibrate.report import is_validate_report, load_validate_report

        doc = read_json(spec)
        if is_validate_report(doc):
            doc = load_validate_report(spec)["semantics"]  # the semantics a validate run measured in its rounds
        elif isinstance(doc, dict) and isinstance(doc.get("semantics"), dict):
            doc = doc["semantics"]
        try:
            return semantics_from_json(doc, where=spec)
        except CommschedError as e:
            raise CommschedError(str(e) if str(e).startswith(spec) else f"{spec}: {e}") from None
    raise CommschedError(f"--runtime must be nccl, gloo or a semantics JSON file, got {spec!r}")


def _describe_semantics(sem) -> str:
    text = sem.backend if sem.threads == 1 else f"{sem.backend} ({sem.threads} threads, gain {sem.concurrency_gain:g})"
    if sem.contended:
        text += (
            f", compute +{sem.compute_slowdown:.0%} under all-reduce, all-reduce +{sem.comm_slowdown:.0%} under compute"
            f", {sem.call_overhead_s * 1e3:+.2f} ms per call under compute"
        )
        if sem.launch_factor_points:
            text += ", launched from backward " + ", ".join(f"{b} B x{r:.2f}" for b, r in sem.launch_factor_points)
        if sem.under_compute:
            text += ", all-reduce under compute " + ", ".join(f"{b} B x{f:.2f}" for b, f in sem.under_compute)
        if sem.launch_compute_s:
            text += f", {sem.launch_compute_s * 1e6:.0f} us of compute per bucket launched"
    return text


def _write_plan_outputs(cmp, out: Path) -> None:
    """plan.json and ddp_options.json of the recommended plan (what to run), the trace of every
    strategy, the Gantt chart of the recommended, fastest and default DDP's timelines, the report."""
    from commsched.ddp_buckets import ddp_options_doc
    from commsched.io import plan_to_json, write_json
    from commsched.report.plots import check_timelines, gantt_png
    from commsched.report.trace import chrome_trace

    rows = cmp.rows
    rec = cmp.recommended.strategy
    shown = {name: rows[name].timeline for name in dict.fromkeys([rec, cmp.best, "ddp"]) if name in rows}
    check_timelines(shown)  # what the plot needs, before any file is written
    from commsched.report.html import plan_section, render_html

    section = plan_section(cmp)
    page = render_html([section])  # rendered (and checked for non-finite numbers) before any write
    plan = rows[rec].plan
    write_json(out / "plan.json", plan_to_json(plan))
    write_json(out / "ddp_options.json", ddp_options_doc(plan))  # commsched.ddp_options/v1
    if any(b.resources is not None for b in plan.buckets):
        from commsched.nccl_tuner import table_from_plan, table_text

        (out / "nccl_tuner_table.txt").write_text(table_text(table_from_plan(plan), f"strategy {plan.strategy}, model {plan.model}"))
    ordered = {rec: rows[rec].timeline} | {k: r.timeline for k, r in rows.items() if k != rec}
    write_json(out / "trace.json", chrome_trace(ordered))
    p = cmp.profile
    gantt_png(shown, out / "gantt.png", title=f"{p.model} on {cmp.cluster.name} ({cmp.cluster.workers} workers)")
    write_json(out / "report-data.json", section.data)  # what `commsched report --from` renders again
    (out / "report.html").write_text(page, encoding="utf-8")


@cli.command()
@_strategy_options
@click.option(
    "--workers", "workers_spec", default=None,
    help="Worker counts (GPUs), e.g. 4,8,...,2048 [default: 4,8,...,2048; on a hierarchical cluster 1,2,...,2048 nodes].",
)
@click.option("--nodes", "nodes_spec", default=None, help="Node counts of a hierarchical cluster, e.g. 1,2,...,2048 (workers = nodes x GPUs per node).")
@click.option("--algorithm", "algorithms", multiple=True, help="All-reduce algorithm(s) (default: the cluster's).")
@click.option("--out", "out_dir", default="out", show_default=True, help="Directory for scale.csv and scale.png.")
def scale(
    profile_paths, models, batch_size, device, image_size, efficiency, dtype, cluster_spec, strategies, bucket_mb,
    horovod_threshold_mb, horovod_cycle_ms, workers_spec, nodes_spec, algorithms, out_dir,
) -> None:
    """Predict scaling from few to thousands of workers, per strategy and all-reduce algorithm."""
    from commsched.report.plots import check_scaling_rows, scaling_png
    from commsched.report.progress import progress
    from commsched.scale import expand_workers, mark_rows, sweep

    algos = _split(algorithms)
    cluster = _cluster(cluster_spec, None, None)
    workers = _scale_workers(cluster, workers_spec, nodes_spec)
    for a in algos or [None]:  # fail before any work on an unknown algorithm or a fitted-only cluster
        c = cluster.with_algorithm(a) if a else cluster
        for n in workers:
            c.with_workers(n)
    # the optimum: scale compares what the model predicts; plan and validate write what is applied
    planners = _planners(strategies, bucket_mb, horovod_threshold_mb, horovod_cycle_ms)
    chooses = [p.name for p in planners if hasattr(p, "assign")]
    if chooses:
        raise CommschedError(
            f"scale does not plan per-bucket resources ({', '.join(chooses)}); use `commsched plan` on one worker count"
        )
    if cluster.resources is not None:
        click.echo(f"note: scale predicts without contention; {cluster.name}'s resources and contention model are used by plan", err=True)
    device = device or cluster.device or DEFAULT_DEVICE
    profiles = _profiles(profile_paths, _split(models) or ([] if profile_paths else [DEFAULT_MODEL]), batch_size, device, image_size, efficiency, dtype)
    from commsched.report.plots import MAX_PLOT_ROWS

    if len(profiles) > MAX_PLOT_ROWS:  # scale.png has a row per model; fail before the sweep
        raise CommschedError(f"scale plots at most {MAX_PLOT_ROWS} models in one run, got {len(profiles)}")
    total = len(profiles) * max(len(algos), 1) * len(workers) * len(planners)
    with progress(True, "simulating", total) as bar:
        rows = sweep(profiles, cluster, workers, planners, algos or None, progress=bar.advance)
    check_scaling_rows(rows)  # every number finite and plottable, before any file is written
    rows, markers = mark_rows(rows)  # 0/1 columns: each curve's bend, synceasgd overtaking wfbp, optimal's one bucket
    from commsched.report.html import render_html, scale_section

    page = render_html([scale_section(rows, title=f"predicted scaling on {cluster.name}")])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scale.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    # the plot is drawn before the table is printed, so a table on stdout means every file was written
    scaling_png(rows, out / "scale.png", title=f"predicted scaling on {cluster.name}", markers=markers)
    # not report.html: scale's default directory is plan's, whose page `make run` writes
    (out / "scale-report.html").write_text(page, encoding="utf-8")
    _print_scale_summary(rows, workers, markers)
    click.echo(f"wrote {out}/scale.csv ({len(rows)} rows), {out}/scale.png and {out}/scale-report.html", err=True)


def _scale_workers(cluster, workers_spec: str | None, nodes_spec: str | None) -> tuple[int, ...]:
    """Worker counts of a sweep: --workers (GPUs), or --nodes x GPUs per node on a hierarchical cluster
    (its default: 1,2,...,2048 nodes)."""
    from commsched.scale import expand_workers
    from commsched.types import MAX_WORKERS

    per_node = cluster.gpus_per_node
    if nodes_spec is not None and workers_spec is not None:
        raise CommschedError("give --workers (GPUs) or --nodes, not both")
    if nodes_spec is not None and per_node is None:
        raise CommschedError(f"--nodes needs a hierarchical cluster (nodes x GPUs per node); {cluster.name!r} is flat: use --workers")
    if nodes_spec is None and workers_spec is None and per_node is not None:
        nodes_spec = "1,2,...,2048"
    if nodes_spec is None:
        return expand_workers(workers_spec or "4,8,...,2048")
    nodes = expand_workers(nodes_spec, "node count")
    if nodes[-1] * per_node > MAX_WORKERS:
        raise CommschedError(f"{nodes[-1]} nodes x {per_node} GPUs is {nodes[-1] * per_node:,} workers; at most 2**20 (1,048,576)")
    return tuple(n * per_node for n in nodes)


def _print_scale_summary(rows: list[dict], workers: Sequence[int], markers: Sequence = ()) -> None:
    """The scaling factors, a cell marked * where its strategy's curve bends; then one line per marker."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    bends = {(m.model, m.algorithm, m.strategy, m.workers) for m in markers if m.kind == "bend"}
    t = Table(title="scaling factor T1/(N T_N) (* where the curve bends: 10% below its best so far)", title_justify="left")
    for col in ("model", "algorithm", "strategy", *map(str, workers)):
        t.add_column(col, justify="left" if not col.isdigit() else "right")
    keyed: dict[tuple, dict[int, float]] = {}
    for r in rows:
        keyed.setdefault((r["model"], r["algorithm"], r["strategy"]), {})[r["workers"]] = r["scaling_factor"]
    for (m, a, s), by_n in keyed.items():
        t.add_row(escape(m), escape(a), escape(s), *(f"{by_n[n]:.2f}" + ("*" if (m, a, s, n) in bends else "") for n in workers))
    console = Console(width=max(120, Console().width))
    console.print(t)
    for mk in markers:
        console.print(escape(mk.describe()), highlight=False)


def _bench_comm_main():
    from commsched.runtime.bench_comm import main as bench_main

    return bench_main


def _bench_resources_main():
    from commsched.runtime.bench_resources import main as bench_main

    return bench_main


def _emulate_main():
    from commsched.emulate import main as emulate_main

    return emulate_main


_PASS_THROUGH_COMMANDS = {"bench-comm": _bench_comm_main, "bench-resources": _bench_resources_main, "emulate": _emulate_main}


@cli.command("bench-comm", add_help_option=False)
def bench_comm() -> None:
    """Under torchrun: time all-reduce from 4 B to 256 MiB, fit, write a cluster file (--out; --help for all)."""


@cli.command("bench-resources", add_help_option=False)
def bench_resources() -> None:
    """Under torchrun on GPUs: all-reduce time and backward slowdown per NCCL config; --fit: sample files to a cluster file."""


@cli.command(add_help_option=False)
def emulate() -> None:
    """Run a command with one rank per emulated node (netns + tc tbf): --nodes N --rate-mbit R -- ARGS."""


@cli.command()
@click.option("--model", default="resnet18", show_default=True, help="Zoo model.")
@click.option("--batch-size", default=16, show_default=True, type=int)
@click.option("--image-size", type=int, default=None)
@click.option("--strategy", "strategies", multiple=True, help="Strategies to run (default all; optimal is planned for the measured contention).")
@click.option("--rounds", default=12, show_default=True, type=int, help="Interleaved rounds (A B C ... A B C ...).")
@click.option("--steps", default=2, show_default=True, type=int, help="Timed steps per strategy per round.")
@click.option("--out", "out_dir", default="out/validate", show_default=True)
@click.option("--min-gain", type=float, default=None, help=MIN_GAIN_HELP)
def validate(model, batch_size, image_size, strategies, rounds, steps, out_dir, min_gain) -> None:
    """Under torchrun: profile, benchmark, predict, then train every strategy and compare with measurement."""
    import os
    from dataclasses import replace

    from commsched.planners import planner
    from commsched.planners.optimal import check_min_gain

    if min_gain is not None:
        check_min_gain(min_gain, "--min-gain")
    if "RANK" not in os.environ:
        raise CommschedError("validate runs one process per rank: torchrun --nproc_per_node=2 -m commsched validate ...")
    from commsched.types import MAX_STEPS

    _check_model_inputs(batch_size, image_size)
    for what, v in (("--rounds", rounds), ("--steps", steps)):
        _bounded(what, v, MAX_STEPS, f"{MAX_STEPS:,}")
    names = _split(strategies)
    for n in names:
        if hasattr(planner(n), "assign"):
            raise CommschedError(f"validate runs gloo on CPUs, which has no per-all-reduce GPU resources: strategy {n!r} needs an NCCL cluster")
    import torch
    import torch.distributed as dist

    from commsched.runtime.validate import ValidationConfig, print_report, run

    cfg = ValidationConfig(model=model, batch_size=batch_size, image_size=image_size, rounds=rounds, steps=steps, out_dir=out_dir)
    if min_gain is not None:
        cfg = replace(cfg, min_gain=min_gain)
    if names:
        cfg = replace(cfg, strategies=tuple(names))
    from commsched.runtime.lifecycle import end_process_group

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    clean = False
    try:
        report = run(cfg)
        if report is not None:
            print_report(report)
            click.echo(f"wrote {out_dir}/validate.json, validate.png, validate-report.html, measured-trace.json, measured-gantt.png", err=True)
        clean = True
    finally:
        end_process_group(clean)


@cli.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Zoo model to rank.")
@click.option("--profile", "profile_path", default=None, help="Profile JSON instead of a zoo model.")
@click.option("--batch-size", default=DEFAULT_BATCH, show_default=True, type=int)
@click.option("--device", default=None, help=f"GPU for estimated profiles (default: the cluster's, else {DEFAULT_DEVICE}).")
@click.option("--image-size", type=int, default=None)
@_DTYPE_OPTION
@click.option("--cluster", "cluster_spec", default="osf-2080ti-25gbe", show_default=True, help="Preset name or cluster JSON.")
@click.option("--workers", type=int, default=None, help="Rescale the cluster to this many workers.")
@click.option("--strategy", default="optimal", show_default=True, help="Strategy whose plan is re-made for each layer.")
@click.option("--top", default=10, show_default=True, type=int, help="Layers to print.")
@click.option("--replaced-by", "alternatives", multiple=True, help="Zoo model(s) to compare scaling factors with (e.g. vgg16_nin).")
@click.option("--sweep", "workers_spec", default="4,8,16,32", show_default=True, help="Worker counts of the comparison.")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking (and comparison) as JSON on stdout.")
def layers(
    model, profile_path, batch_size, device, image_size, dtype, cluster_spec, workers, strategy, top, alternatives,
    workers_spec, as_json,
) -> None:
    """Rank a model's layers by the non-overlapped communication they cause (OSF Section 4.1)."""
    from commsched.planners import planner
    from commsched.report.progress import progress
    from commsched.scale.sweep import expand_workers
    from commsched.whatif import layer_of, rank_layers, scaling_factors

    _bounded("--top", top, 10**6, "1,000,000")
    cluster = _cluster(cluster_spec, workers, None)
    device = device or cluster.device or DEFAULT_DEVICE
    chosen = planner(strategy)
    if hasattr(chosen, "assign"):
        raise CommschedError(f"layers compares plain plans; {strategy!r} plans per-bucket resources")
    sweep_workers = expand_workers(workers_spec) if alternatives else ()
    for n in sweep_workers:
        cluster.with_workers(n)  # a fitted cluster cannot rescale: fail before any work
    if profile_path is not None and alternatives:
        raise CommschedError("--replaced-by compares zoo models; rank a profile file without it")
    if profile_path is not None:
        from click.core import ParameterSource

        ctx = click.get_current_context()
        for opt, param in (("--model", "model"), ("--batch-size", "batch_size"), ("--image-size", "image_size"), ("--device", "device")):
            if ctx.get_parameter_source(param) is not ParameterSource.DEFAULT:
                raise CommschedError(f"{opt} sets a zoo profile; --profile {profile_path} is used as it is")
    profiles = _profiles([profile_path] if profile_path else [], [] if profile_path else [model], batch_size, device, image_size, None, dtype)
    (prof,) = profiles.values()
    layer_count = len({layer_of(t.name) for t in prof.tensors})
    with progress(True, f"re-planning {prof.model} without each layer", layer_count) as bar:
        ranking = rank_layers(prof, cluster, chosen, progress=bar.advance)
    compared = {}
    if alternatives:
        alt = _profiles([], list(alternatives), batch_size, device, image_size, None, dtype)
        compared = scaling_factors([prof, *alt.values()], cluster, sweep_workers, chosen)
    if as_json:
        from commsched.io import dumps

        doc = {
            "model": ranking.model, "cluster": ranking.cluster, "workers": ranking.workers, "strategy": ranking.strategy,
            "iteration_s": ranking.iteration_s, "compute_s": ranking.compute_s, "scaling_factor": ranking.scaling_factor,
            "layers": [{"layer": c.layer, "tensors": list(c.tensors), "bytes": c.bytes, "saved_s": c.saved_s} for c in ranking.layers],
            "scaling_factors": {m: {str(n): sf for n, sf in row.items()} for m, row in compared.items()},
        }
        click.echo(dumps(doc, "layers --json", indent=2))
        return
    click.echo(
        f"{ranking.model} on {ranking.cluster} ({ranking.workers} workers), {ranking.strategy}: iteration "
        f"{ranking.iteration_s * 1e3:.2f} ms, compute {ranking.compute_s * 1e3:.2f} ms, non-overlapped communication "
        f"{ranking.non_overlapped_s * 1e3:.2f} ms, scaling factor {ranking.scaling_factor:.3f}"
    )
    click.echo(f"{'layer':40s} {'tensors':>7s} {'MB':>9s} {'saved ms':>9s} {'share':>6s}")
    total = ranking.non_overlapped_s
    for c in ranking.layers[:top]:
        share = f"{c.saved_s / total:6.1%}" if total > 0 else "     -"
        click.echo(f"{c.layer[:40]:40s} {len(c.tensors):7d} {c.bytes / 1e6:9.2f} {c.saved_s * 1e3:9.2f} {share}")
    if compared:
        click.echo(f"scaling factor (T_comp / T_iter) with {ranking.strategy}:")
        click.echo(f"{'model':14s} " + " ".join(f"{n:>7d}" for n in sweep_workers))
        for m, row in compared.items():
            click.echo(f"{m[:14]:14s} " + " ".join(f"{row[n]:7.3f}" for n in sweep_workers))


@cli.command()
@click.option("--from", "from_path", default="out", show_default=True,
              help="A directory that plan/scale/validate --out wrote, or one report-data.json, scale.csv or validate.json.")
@click.option("--out", "out_path", default=None, help="HTML file to write (default: report.html in the --from directory).")
def report(from_path, out_path) -> None:
    """One self-contained HTML page (no network needed) of a plan comparison, a scale sweep or a validate run."""
    from commsched.report.html import load_sections, write_report

    src = Path(from_path)
    sections = load_sections(src)  # every input checked before the page is written
    # one file's page is named by its kind, as scale and validate name theirs: plan's report.html stays
    default = "report.html" if src.is_dir() or sections[0].kind == "plan" else f"{sections[0].kind}-report.html"
    out = Path(out_path) if out_path else (src if src.is_dir() else src.parent) / default
    write_report(out, sections)
    click.echo(f"wrote {out} ({', '.join(f'{s.kind} from {s.source}' for s in sections)})", err=True)


@cli.command("nccl-tuner")
@click.argument("plan_path", required=False, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default="out/nccl-tuner", show_default=True, help="Directory for the library and the table.")
@click.option("--build/--no-build", default=True, show_default=True, help="Compile the plugin with the system C compiler.")
def nccl_tuner(plan_path, out_dir, build) -> None:
    """Write an NCCL tuner table from a plan (bucket bytes -> blocks) and build the tuner plugin."""
    from commsched.nccl_tuner import LIBRARY_NAME, build_plugin, check_plugin_path, plugin_env, table_from_plan, table_text

    if plan_path is None and not build:
        raise CommschedError("nothing to do: give a plan file, or drop --no-build to build the plugin")
    out = Path(out_dir)
    library = out / LIBRARY_NAME
    check_plugin_path(library)  # before anything is written: NCCL would cut a longer path and load nothing
    table_path = out / "nccl_tuner_table.txt"
    if plan_path is not None:
        from commsched.io import load_plan

        plan = load_plan(plan_path)
        table = table_from_plan(plan)
        out.mkdir(parents=True, exist_ok=True)
        table_path.write_text(table_text(table, f"from {plan_path}: strategy {plan.strategy}, model {plan.model}"))
        set_ranges = sum(1 for r in table.ranges if r.channels)
        click.echo(f"wrote {table_path}: {len(table.ranges)} bucket sizes, {set_ranges} with a channel count", err=True)
        for c in table.conflicts:
            click.echo(
                f"warning: buckets {', '.join(map(str, c.buckets))} all have {c.bytes} bytes but blocks "
                f"{', '.join(map(str, c.channels))}; the tuner keys on size, so all get {c.channels_kept} "
                "(the resource hook applies each bucket's own)",
                err=True,
            )
        if not set_ranges:
            click.echo("note: the plan has no per-bucket resources; the plugin will keep NCCL's choice", err=True)
    if build:
        build_plugin(library)
        click.echo(f"built {library}", err=True)
    env = plugin_env(library, table_path)
    if plan_path is None:  # no table written: the user points COMMSCHED_NCCL_TUNER_TABLE at one
        env = {k: v for k, v in env.items() if k == "NCCL_TUNER_PLUGIN"}
    if not library.is_file():  # --no-build and none built before: build it with `make tuner` or without --no-build
        env.pop("NCCL_TUNER_PLUGIN")
        click.echo(f"note: {library} is not built; run again without --no-build to build it", err=True)
    import shlex

    click.echo("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))


@cli.command()
def presets() -> None:
    """List the built-in models, devices, clusters and strategies, with their sources."""
    from commsched.cost.cluster import PRESETS
    from commsched.devices import CALIBRATED_EFFICIENCY, DEVICES
    from commsched.planners import RESOURCE_STRATEGIES, STRATEGIES

    click.echo("strategies: " + ", ".join(STRATEGIES))
    click.echo("resource strategies (clusters with per-bucket resources): " + ", ".join(RESOURCE_STRATEGIES))
    from commsched.models.names import ZOO_MODELS

    click.echo("models: " + ", ".join(ZOO_MODELS))
    click.echo(f"devices (efficiency c = {CALIBRATED_EFFICIENCY:.3f}):")
    for d in DEVICES.values():
        click.echo(f"  {d.name:10s} {d.peak_flops / 1e12:6.2f} TFLOP/s  {d.source}")
    click.echo("clusters:")
    for c in PRESETS.values():
        click.echo(f"  {c.name:21s} {c.workers:3d} workers  {json.dumps(c.allreduce.to_json())}")
        click.echo(f"  {'':21s} source: {c.source}")
        if c.resources is not None:
            r = c.resources
            click.echo(
                f"  {'':21s} resources: {len(r.allowed)} configs ({', '.join(r.label(x) for x in r.allowed)}), "
                f"default {r.label(r.default)}, contention model {r.contention.kind}"
                + (f", run by {r.library}" if r.library else "")
            )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(argv) if argv is not None else sys.argv[1:]
    if not args:
        args = ["--help"]
    if args[0] in _PASS_THROUGH_COMMANDS:
        # argparse-based tools keep their own parsing (click would swallow the `--` before a command)
        return _PASS_THROUGH_COMMANDS[args[0]]()(args[1:])
    try:
        cli.main(args=args, prog_name="commsched", standalone_mode=False)
    except CommschedError as e:
        click.echo(f"commsched: error: {_one_line(str(e))}", err=True)
        return 2
    except BrokenPipeError:  # stdout closed early (| head): nothing left to say
        return 0
    except OSError as e:  # an output path that cannot be written, a full disk, ...
        where = f" {e.filename}" if e.filename else ""
        click.echo(f"commsched: error:{_one_line(where)}: {_one_line(str(e.strerror or e))}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("commsched: aborted", err=True)
        return 130
    except click.ClickException as e:
        click.echo(f"commsched: error: {_one_line(e.format_message())}", err=True)
        return 2
    return 0


def _one_line(message: str) -> str:
    """Errors are one line: a newline inside a name or a path (a file called "a\nb") is shown escaped."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


if __name__ == "__main__":
    sys.exit(main())
