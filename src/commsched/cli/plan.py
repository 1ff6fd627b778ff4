"""``commsched plan``: every strategy's plan for one model, their predicted iterations, the recommended plan's files."""

from __future__ import annotations

from pathlib import Path

import click

from commsched.cli.common import DEFAULT_DEVICE, DEFAULT_MODEL, MIN_GAIN_HELP, cluster, planners, profiles, refuse_zoo_options, strategy_options, table_console
from commsched.errors import CommschedError


@click.command()
@strategy_options
@click.option("--workers", type=int, default=None, help="Worker count (rescales a cluster given by link parameters).")
@click.option("--algorithm", default=None, help="All-reduce algorithm (ring, tree, double_binary_tree, ...).")
@click.option(
    "--runtime", "runtime_spec", default="nccl", show_default=True,
    help="Execution semantics of the runtime that runs the plan: nccl, gloo, or a semantics JSON (validate writes one).",
)
@click.option("--min-gain", type=float, default=None, help=MIN_GAIN_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print {strategies, best, recommended} as one JSON document on stdout (best: the fastest; recommended: what to run).")
@click.option("--out", "out_dir", default=None, help="Directory for plan.json (the recommended plan), ddp_options.json, trace.json, gantt.png, report-data.json and report.html, and nccl_tuner_table.txt for a plan with resources (default out/).")
def plan(
    profile_paths, models, batch_size, device, image_size, efficiency, dtype, cluster_spec, strategies, bucket_mb,
    horovod_threshold_mb, horovod_cycle_ms, workers, algorithm, runtime_spec, min_gain, as_json, out_dir,
) -> None:
    """Plan one model with every strategy; compare predicted iteration times; write the recommended plan."""
    from commsched.formats.io import dumps, plan_to_json
    from commsched.formats.specs import semantics_from_spec
    from commsched.planners import MIN_GAIN_OVER_DDP
    from commsched.planners.compare import compare
    from commsched.planners.optimal import check_min_gain
    from commsched.report.outputs import write_plan_files

    if len(profile_paths) + len(models) > 1:
        raise CommschedError("plan takes one model: give either one --profile or one --model")
    refuse_zoo_options(profile_paths, models)
    c = cluster(cluster_spec, workers, algorithm)
    min_gain = MIN_GAIN_OVER_DDP if min_gain is None else min_gain
    check_min_gain(min_gain, "--min-gain")
    chosen = planners(strategies, bucket_mb, horovod_threshold_mb, horovod_cycle_ms, c.resources is not None)
    device = device or c.device or DEFAULT_DEVICE
    (prof,) = profiles(profile_paths, models or ([] if profile_paths else [DEFAULT_MODEL]), batch_size, device, image_size, efficiency, dtype).values()
    cmp = compare(prof, c, chosen, semantics_from_spec(runtime_spec), min_gain)
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
    written = write_plan_files(cmp, out) if out is not None else []
    if as_json:
        click.echo(text)
    else:
        _print_comparison(cmp)
    if written:
        click.echo(f"recommended: {rec.strategy}; wrote " + ", ".join(str(p) for p in written), err=True)


def _print_comparison(cmp) -> None:
    from rich.markup import escape
    from rich.table import Table

    p, c = cmp.profile, cmp.cluster
    t = Table(
        # names from files are text, not rich markup: a cluster called "[/x]" must not fail the table
        title=escape(
            f"{p.model} (batch {p.batch_size}, {p.device + ', ' if p.device else ''}{p.source}) on {c.name}: {c.workers} workers, "
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
    optimizer = p.optimizer_s > 0  # a measured profile's update: the columns then add up to the iteration
    cols = ["strategy", "iteration ms", "compute ms", "non-overlapped comm ms", *(["optimizer ms"] if optimizer else []),
            "scaling factor", "buckets", "speedup vs DDP"]
    if c.resources is not None:
        cols.append("resources")
    for col in cols:
        t.add_column(col, justify="left" if col == "strategy" else "right")
    rec = cmp.recommended
    rec_s = cmp.rows[rec.strategy].timeline.iteration_s

    def order(row) -> tuple[float, bool]:
        # rows tied with the recommendation (as recommend() ties them) sit with it, it first
        s = row[1].timeline.iteration_s
        return (rec_s if abs(s - rec_s) <= 1e-9 * abs(rec_s) else s, row[0] != rec.strategy)

    for name, r in sorted(cmp.rows.items(), key=order):
        tl = r.timeline
        t.add_row(
            f"[bold]{escape(name)} *[/bold]" if name == rec.strategy else escape(name),
            f"{tl.iteration_s * 1e3:.2f}",
            f"{tl.compute_s * 1e3:.2f}",
            f"{tl.non_overlapped_comm_s * 1e3:.2f}",
            *([f"{p.optimizer_s * 1e3:.2f}"] if optimizer else []),
            f"{r.scaling_factor:.3f}",
            str(len(r.plan.buckets)),
            f"{r.speedup_vs_ddp:.3f}x",
            *([_resources_short(r.plan, c.resources)] if c.resources is not None else []),
        )
    t.caption = escape(f"* recommended (what to run): {rec.strategy}, {rec.reason}")
    t.caption_justify = "left"
    table_console().print(t)


def _resources_short(plan, resources) -> str:
    """A plan's configs in short: one config for every bucket (e.g. ``1x256``; on stock NCCL with what
    NCCL launches for it, ``2x256 (NCCL runs 2x288)``), or ``mixed``."""
    shorts = {resources.label(resources.config_of(b.resources)) for b in plan.buckets}
    if len(shorts) > 1:
        return "mixed"
    (one,) = shorts
    return one


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
