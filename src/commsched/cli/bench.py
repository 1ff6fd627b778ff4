"""``commsched bench-comm`` and ``commsched bench-resources``: measure a machine, under torchrun, and
write what the planners read (a cluster file, or samples that ``bench-resources --fit`` turns into one).

Under torchrun every rank runs the command: only rank 0 writes and prints, and an error that every
rank meets alike (a bad option, the machine) is one line from rank 0 alone.
"""

from __future__ import annotations

import math
import os

import click

from commsched.cli.common import TORCHRUN_ENV, bounded, only_rank_0_reports
from commsched.errors import CommschedError

MIB = 1 << 20


def _check_count(what: str, value: int, minimum: int) -> None:
    from commsched.types import MAX_STEPS

    if value < minimum:
        raise CommschedError(f"{what} must be an integer >= {minimum}, got {value!r}")
    bounded(what, value, MAX_STEPS, f"{MAX_STEPS:,}", lower=minimum, strict=False)


@click.command("bench-comm")
@click.option("--out", "out_path", required=True, help="Cluster JSON to write (with the fit report and samples).")
@click.option("--samples", "samples_path", default=None, help="Also write the raw samples to this JSON file.")
@click.option("--max-mb", type=float, default=256.0, help="Largest message, MiB (default 256).")
@click.option("--repeats", type=int, default=11, help="Timed all-reduces per size (default 11).")
@click.option("--warmup", type=int, default=3, help="Un-timed all-reduces per size (default 3).")
@click.option("--name", default="measured", help="Cluster name (default 'measured').")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def bench_comm(out_path, samples_path, max_mb, repeats, warmup, name, no_progress) -> None:
    """Under torchrun: time all-reduce from 4 B to 256 MiB, fit, write a cluster file.

    Times all-reduce over a range of message sizes (NCCL when CUDA is available, else gloo) and writes
    a commsched.cluster/v1 file, the better of the alpha-beta and piecewise fits, with both fits and
    the samples beside it; rank 0 writes and prints a table of both fits:

    \b
        torchrun --nproc_per_node=N -m commsched bench-comm --out cluster.json
    """
    try:
        if not max_mb > 0:
            raise CommschedError(f"--max-mb must be > 0, got {max_mb!r}")
        if not math.isfinite(max_mb):
            raise CommschedError(f"--max-mb must be a finite number of MiB, got {max_mb!r}")
        max_bytes = int(max_mb * MIB)
        if max_bytes < 4:
            raise CommschedError(f"--max-mb {max_mb!r} is below one 4-byte element")
        _check_count("--repeats", repeats, 1)
        _check_count("--warmup", warmup, 0)
        missing = [k for k in TORCHRUN_ENV if k not in os.environ]
        if missing:
            raise CommschedError(
                f"no process group environment ({', '.join(missing)} unset); run under torchrun, e.g. "
                f"torchrun --nproc_per_node=2 -m commsched bench-comm --out cluster.json"
            )
    except CommschedError as e:
        only_rank_0_reports(e)
    from commsched.formats.io import write_json
    from commsched.runtime.bench_comm import measure_cluster

    measured = measure_cluster(max_bytes, warmup=warmup, repeats=repeats, name=name, progress=not no_progress)
    if measured is None:  # not rank 0
        return
    samples, cluster, report = measured
    write_json(out_path, {**cluster.to_json(), "fit": report, "samples": samples.to_json()})
    if samples_path:
        write_json(samples_path, samples.to_json())
    click.echo(_comm_summary(samples, report))
    click.echo(f"wrote {out_path}" + (f" and {samples_path}" if samples_path else ""))


def _comm_summary(samples, report: dict) -> str:
    """A plain-text table: measured times next to both fits, then the fitted parameters."""
    from commsched.cost.cost_json import cost_model_from_json
    from commsched.runtime.bench_comm import human_bytes

    ab = cost_model_from_json(report["alpha_beta"]["allreduce"], samples.world_size)
    pw_json = report.get("piecewise", {})
    pw = cost_model_from_json(pw_json["allreduce"], samples.world_size) if "allreduce" in pw_json else None
    lines = [
        f"all-reduce on {samples.backend}, {samples.world_size} ranks (ms; median = slowest rank's median)",
        f"{'size':>10} {'median':>10} {'min':>10} {'max':>10} {'alpha-beta':>11} {'piecewise':>10}",
    ]
    for size, med, lo, hi in zip(samples.sizes_bytes, samples.time_s, samples.min_s, samples.max_s):
        pw_ms = f"{pw.time_s(size) * 1e3:10.4f}" if pw is not None else f"{'-':>10}"
        lines.append(
            f"{human_bytes(size):>10} {med * 1e3:10.4f} {lo * 1e3:10.4f} {hi * 1e3:10.4f} "
            f"{ab.time_s(size) * 1e3:11.4f} {pw_ms}"
        )
    a = report["alpha_beta"]
    bandwidth = 1 / ab.beta_s_per_byte / 1e9 if ab.beta_s_per_byte > 0 else float("inf")
    lines.append(
        f"alpha-beta: alpha={ab.alpha_s:.3e} s, beta={ab.beta_s_per_byte:.3e} s/B ({bandwidth:.2f} GB/s), "
        f"max rel error {a['max_abs_rel_error']:.1%}"
    )
    if pw is not None:
        p = pw_json["allreduce"]
        lines.append(
            f"piecewise:  threshold={human_bytes(p['threshold_bytes'])}, a1={p['a1_s']:.3e} s, b1={p['b1_s']:.3e} s, "
            f"a2={p['a2_s_per_byte']:.3e} s/B, b2={p['b2_s']:.3e} s, max rel error {pw_json['max_abs_rel_error']:.1%}"
        )
    else:
        lines.append(f"piecewise:  not fitted ({pw_json.get('error', 'unknown reason')})")
    lines.append(f"chosen: {report['chosen']} (by {report['criterion']})")
    lines.extend(f"warning: {w}" for w in report.get("warnings", ()))
    return "\n".join(lines)


@click.command("bench-resources")
@click.option("--out", "out_path", required=True, help="Samples JSON to write (measuring) or cluster JSON (with --fit).")
@click.option("--fit", is_flag=True, help="Fit the SAMPLES files given (one per NCCL_NTHREADS) instead of measuring.")
@click.argument("sample_paths", metavar="[SAMPLES]...", nargs=-1)
@click.option("--default", "default_config", default="2x256", help="The library default config BxT, what null resources get (default 2x256).")
@click.option("--name", default="measured-resources", help="Cluster name (with --fit).")
@click.option("--blocks", default="1,2,3,4", help="Block counts to measure (default 1,2,3,4).")
@click.option("--repeats", type=int, default=11, help="Timed repetitions per point (default 11).")
@click.option(
    "--mechanism", type=click.Choice(["tuner", "groups"]), default="tuner",
    help="How blocks are set: commsched's NCCL tuner plugin (default; needs a C compiler) or process groups with min_ctas = max_ctas.",
)
def bench_resources(out_path, fit, sample_paths, default_config, name, blocks, repeats, mechanism) -> None:
    """Under torchrun on GPUs: all-reduce time and backward slowdown per NCCL config; --fit: sample files to a cluster file.

    Measuring (CUDA and NCCL, at least 2 ranks): for each block count of --blocks, all-reduces
    alone at each size and the slowdown of a backward pass (torchvision's resnet18, batch 32) beside
    them; threads per block are NCCL_NTHREADS, one value per process, so run it once per value:

    \b
        NCCL_NTHREADS=256 torchrun --nproc_per_node=2 -m commsched bench-resources --out s256.json

    Fitting (any machine) merges the sample files of one machine into a cluster with per-all-reduce
    resources (a measured-grid contention model, alpha-beta from the default config's times):

    \b
        commsched bench-resources --fit s64.json s256.json --out cluster.json
    """
    try:
        if fit:
            _fit(sample_paths, out_path, default_config, name)
        elif sample_paths:
            raise CommschedError(f"sample files ({', '.join(sample_paths)}) go with --fit: --fit FILE... --out cluster.json")
        else:
            _measure(out_path, blocks, repeats, mechanism)
    except (CommschedError, OSError) as e:
        only_rank_0_reports(e)


def _fit(sample_paths, out_path, default_config, name) -> None:
    from commsched.cost.resource_samples import config_from_text, fit_sample_files
    from commsched.formats.io import write_json

    if not sample_paths:
        raise CommschedError("--fit needs the sample files to fit: --fit a.json b.json ... --out cluster.json")
    cluster, report = fit_sample_files(sample_paths, config_from_text(default_config), name)
    write_json(out_path, {**cluster.to_json(), "fit": report})
    click.echo(f"wrote {out_path}: {len(cluster.resources.allowed)} configs, default {cluster.resources.default.short}")


def _measure(out_path, blocks, repeats, mechanism) -> None:
    from commsched.cost.resource_samples import DEFAULT_SIZES, check_world_size

    world = os.environ.get("WORLD_SIZE", "").strip()
    if world:  # under torchrun: a world it cannot time is refused before anything else
        check_world_size(int(world) if world.isdigit() else world)
    import torch

    if not torch.cuda.is_available():  # what follows needs CUDA GPUs (gpu_bench)
        raise CommschedError(
            "bench-resources measures NCCL on GPUs and this machine has no CUDA device "
            "(torch.cuda.is_available() is False); fit samples measured elsewhere with --fit"
        )
    threads = os.environ.get("NCCL_NTHREADS", "").strip()
    if not threads.isdigit():
        raise CommschedError("set NCCL_NTHREADS to the threads per block to measure (NCCL has one value per process); run once per value")
    if any(k not in os.environ for k in TORCHRUN_ENV):
        raise CommschedError("run under torchrun, e.g. NCCL_NTHREADS=256 torchrun --nproc_per_node=2 -m commsched bench-resources --out s.json")
    try:
        counts = [int(b) for b in blocks.split(",")]
    except ValueError:
        raise CommschedError(f"--blocks must be comma-separated whole numbers of blocks, got {blocks!r}") from None
    _check_count("--repeats", repeats, 1)
    from commsched.formats.io import write_json
    from commsched.runtime.gpu_bench import measure_resources

    samples = measure_resources(counts, int(threads), DEFAULT_SIZES, repeats, mechanism)
    if int(os.environ["RANK"]) == 0:
        write_json(out_path, samples.to_json())
        click.echo(f"wrote {out_path}")
