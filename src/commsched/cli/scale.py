"""``commsched scale``: predicted scaling from few to thousands of workers, per strategy and all-reduce algorithm."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from commsched.cli.common import DEFAULT_DEVICE, DEFAULT_MODEL, cluster, planners, profiles, refuse_zoo_options, split, strategy_options, table_console
from commsched.errors import CommschedError


@click.command()
@strategy_options
@click.option(
    "--workers", "workers_spec", default=None,
    help="Worker counts (GPUs), e.g. 4,8,...,2048 [default: 4,8,...,2048; on a hierarchical cluster 1,2,...,2048 nodes].",
)
@click.option("--nodes", "nodes_spec", default=None, help="Node counts of a hierarchical cluster, e.g. 1,2,...,2048 (workers = nodes x GPUs per node).")
@click.option("--algorithm", "algorithms", multiple=True, help="All-reduce algorithm(s) (default: the cluster's).")
@click.option("--out", "out_dir", default="out", show_default=True, help="Directory for scale.csv, scale.png and scale-report.html.")
def scale(
    profile_paths, models, batch_size, device, image_size, efficiency, dtype, cluster_spec, strategies, bucket_mb,
    horovod_threshold_mb, horovod_cycle_ms, workers_spec, nodes_spec, algorithms, out_dir,
) -> None:
    """Predict scaling from few to thousands of workers, per strategy and all-reduce algorithm."""
    from commsched.planners import chooses_resources
    from commsched.report.outputs import write_scale_files
    from commsched.report.plots import MAX_PLOT_ROWS
    from commsched.report.progress import progress
    from commsched.scale import sweep

    model_names = split(models, "--model")
    refuse_zoo_options(profile_paths, model_names)
    algos = split(algorithms, "--algorithm")
    c = cluster(cluster_spec, None, None)
    workers = _workers(c, workers_spec, nodes_spec)
    for a in algos or [None]:  # fail before any work on an unknown algorithm or a fitted-only cluster
        ca = c.with_algorithm(a) if a else c
        for n in workers:
            ca.with_workers(n)
    # the optimum: scale compares what the model predicts; plan and validate write what is applied
    chosen = planners(strategies, bucket_mb, horovod_threshold_mb, horovod_cycle_ms)
    chooses = [p.name for p in chosen if chooses_resources(p)]
    if chooses:
        raise CommschedError(
            f"scale does not plan per-bucket resources ({', '.join(chooses)}); use `commsched plan` on one worker count"
        )
    if c.resources is not None:
        click.echo(f"note: scale predicts without contention; {c.name}'s resources and contention model are used by plan", err=True)
    device = device or c.device or DEFAULT_DEVICE
    profs = profiles(profile_paths, model_names or ([] if profile_paths else [DEFAULT_MODEL]), batch_size, device, image_size, efficiency, dtype)
    if len(profs) > MAX_PLOT_ROWS:  # scale.png has a row per model; fail before the sweep
        raise CommschedError(f"scale plots at most {MAX_PLOT_ROWS} models in one run, got {len(profs)}")
    total = len(profs) * max(len(algos), 1) * len(workers) * len(chosen)
    with progress(True, "simulating", total) as bar:
        rows = sweep(profs, c, workers, chosen, algos or None, progress=bar.advance)
    # every file, the plot included, is written before the table is printed: a table on stdout means every file was written
    rows, markers = write_scale_files(rows, out_dir, title=f"predicted scaling on {c.name}")
    _print_summary(rows, workers, markers)
    out = Path(out_dir)
    click.echo(f"wrote {out}/scale.csv ({len(rows)} rows), {out}/scale.png and {out}/scale-report.html", err=True)


def _workers(c, workers_spec: str | None, nodes_spec: str | None) -> tuple[int, ...]:
    """Worker counts of a sweep: --workers (GPUs), or --nodes x GPUs per node on a hierarchical cluster
    (its default: 1,2,...,2048 nodes)."""
    from commsched.scale import expand_workers
    from commsched.types import MAX_WORKERS

    per_node = c.gpus_per_node
    if nodes_spec is not None and workers_spec is not None:
        raise CommschedError("give --workers (GPUs) or --nodes, not both")
    if nodes_spec is not None and per_node is None:
        raise CommschedError(f"--nodes needs a hierarchical cluster (nodes x GPUs per node); {c.name!r} is flat: use --workers")
    if nodes_spec is None and workers_spec is None and per_node is not None:
        nodes_spec = "1,2,...,2048"
    if nodes_spec is None:
        return expand_workers(workers_spec or "4,8,...,2048")
    nodes = expand_workers(nodes_spec, "node count")
    if nodes[-1] * per_node > MAX_WORKERS:
        raise CommschedError(f"{nodes[-1]} nodes x {per_node} GPUs is {nodes[-1] * per_node:,} workers; at most 2**20 (1,048,576)")
    return tuple(n * per_node for n in nodes)


def _print_summary(rows: list[dict], workers: Sequence[int], markers: Sequence = ()) -> None:
    """The scaling factors, a cell marked * where its strategy's curve bends; then one line per marker."""
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
    console = table_console()
    console.print(t)
    for mk in markers:
        console.print(escape(mk.describe()), highlight=False)
