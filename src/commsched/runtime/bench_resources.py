"""GPU microbenchmarks for per-bucket resources, and the fit of their samples into a cluster file
(issue 13, item 3).

Measuring (``torchrun --nproc_per_node=N -m commsched bench-resources --out samples.json``, CUDA
and NCCL only, N >= 2: NCCL runs no kernel for one rank): for each block count B of ``--blocks``,
an NCCL group whose all-reduces get B channels (by default through commsched's NCCL tuner plugin,
item 2; ``--mechanism groups`` uses communicators with min_ctas = max_ctas = B instead, see
:mod:`commsched.runtime.gpu_bench`, which says how each time is taken) times all-reduce alone at
each size, and the slowdown of a backward pass (torchvision resnet18, batch 32; the backward
alone, its forward untimed) while all-reduces of that group run beside it on another stream.
A script can call :func:`commsched.runtime.gpu_bench.measure_resources` with its own world size,
device and model; the samples record how many GPUs the ranks ran on (``gpus``). Threads per block are
NCCL_NTHREADS, one value per process: the command measures the configs B x NCCL_NTHREADS (it
refuses when the variable is unset) and is run once per thread count, and ``--fit`` merges the
sample files.

Fitting (``commsched bench-resources --fit a.json b.json ... --out cluster.json``, any machine):
:func:`fit_resource_cluster` makes the measured-grid contention model of
:mod:`commsched.cost.contention` (all-reduce time relative to the default config at each size,
compute slowdown per config), an alpha-beta all-reduce cost from the default config's times, and
reports LIBRA's Eq. 5 fitted to the same compute samples beside the grid.

The fitting is tested here on the resource-sharing paper's CSVs and on synthetic samples; the
measuring path is written against the documented APIs and has not run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from commsched.cost.cluster import ClusterSpec
from commsched.cost.contention import (
    ClusterResources,
    ResourceConfig,
    config_from_json,
    fit_libra_compute,
    grid_from_samples,
)
from commsched.cost.fit import fit_alpha_beta
from commsched.errors import CommschedError
from commsched.io import write_json

SAMPLES_SCHEMA = "commsched.resource_samples/v1"
DEFAULT_SIZES = tuple(1 << k for k in range(12, 29, 2))  # 4 KiB .. 256 MiB


def check_world_size(world_size: int) -> None:
    """Refuses fewer than two ranks: NCCL runs no kernel for a one-rank all-reduce (an in-place sum
    is nothing at all, src/enqueue.cc:3039 and src/device/onerank.cu:49-55 in NCCL 2.30.7), so
    there is nothing to time."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise CommschedError(
            f"bench-resources needs at least 2 ranks, got a world size of {world_size!r}: NCCL launches no kernel "
            "for one rank's all-reduce, so there is nothing to time"
        )


@dataclass(frozen=True)
class ResourceSamples:
    """Measured on one machine: ``allreduce`` (config, bytes, seconds alone), ``compute`` (config,
    backward time under that config's all-reduce over backward time alone), ``workers`` (ranks),
    ``gpus`` (how many GPUs those ranks ran on: fewer than ``workers`` when ranks shared a GPU; None
    where not recorded, as in files written before it was, which ran one rank per GPU)."""

    workers: int
    allreduce: tuple[tuple[ResourceConfig, int, float], ...]
    compute: tuple[tuple[ResourceConfig, float], ...]
    device: str = ""
    gpus: int | None = None

    def to_json(self) -> dict:
        doc = {
            "schema": SAMPLES_SCHEMA,
            "workers": self.workers,
            "device": self.device,
            "allreduce": [{**c.to_json(), "bytes": b, "seconds": t} for c, b, t in self.allreduce],
            "compute": [{**c.to_json(), "slowdown": s} for c, s in self.compute],
        }
        if self.gpus is not None:  # an optional field: v1 readers that predate it ignore it
            doc["gpus"] = self.gpus
        return doc


def samples_from_json(doc: object, where: str = "samples") -> ResourceSamples:
    if not isinstance(doc, dict) or doc.get("schema") != SAMPLES_SCHEMA:
        raise CommschedError(f"{where}: not a {SAMPLES_SCHEMA} document")
    try:
        workers = int(doc["workers"])
        allreduce = tuple(
            (config_from_json({k: e[k] for k in ("blocks", "threads_per_block")}, where), int(e["bytes"]), float(e["seconds"]))
            for e in doc["allreduce"]
        )
        compute = tuple(
            (config_from_json({k: e[k] for k in ("blocks", "threads_per_block")}, where), float(e["slowdown"])) for e in doc["compute"]
        )
        gpus = None if doc.get("gpus") is None else int(doc["gpus"])
    except (KeyError, TypeError, ValueError) as e:
        raise CommschedError(f"{where}: malformed sample ({e})") from e
    if gpus is not None and not 1 <= gpus <= workers:
        raise CommschedError(f"{where}: gpus must be 1..workers ({workers}), got {gpus}")
    return ResourceSamples(workers, allreduce, compute, str(doc.get("device", "")), gpus)


def merge(samples: Sequence[ResourceSamples]) -> ResourceSamples:
    """Sample files of one machine (one per NCCL_NTHREADS value) as one set."""
    if not samples:
        raise CommschedError("no sample files to fit")
    workers = {s.workers for s in samples}
    if len(workers) != 1:
        raise CommschedError(f"sample files measured with different worker counts {sorted(workers)}: one machine per fit")
    n = workers.pop()
    gpus = {n if s.gpus is None else s.gpus for s in samples}
    if len(gpus) != 1:
        raise CommschedError(f"sample files measured with the ranks on different numbers of GPUs {sorted(gpus)}: one machine per fit")
    return ResourceSamples(
        n,
        tuple(x for s in samples for x in s.allreduce),
        tuple(x for s in samples for x in s.compute),
        next((s.device for s in samples if s.device), ""),
        None if all(s.gpus is None for s in samples) else gpus.pop(),
    )


def fit_resource_cluster(samples: ResourceSamples, default: ResourceConfig, name: str = "measured-resources") -> tuple[ClusterSpec, dict]:
    """A cluster with ``resources`` from ``samples`` (module docstring) and the fit report: the
    grid's compute residuals, LIBRA's Eq. 5 fit of the same samples, the alpha-beta fit."""
    alone = {}
    for cfg, b, t in samples.allreduce:
        if not t > 0:
            raise CommschedError(f"all-reduce time of {cfg.short} at {b} B must be > 0 s, got {t!r}")
        alone.setdefault((cfg, b), []).append(t)
    med = {k: statistics.median(v) for k, v in alone.items()}
    base = {b: t for (c, b), t in med.items() if c == default}
    if not base:
        raise CommschedError(f"no all-reduce samples of the default config {default.short}")
    missing = sorted({b for (c, b) in med if b not in base})
    if missing:
        raise CommschedError(f"sizes {missing} have samples of other configs but not of the default {default.short}")
    relative = [(c, b, t / base[b]) for (c, b), t in sorted(med.items(), key=lambda kv: (kv[0][0].threads, kv[0][0].blocks, kv[0][1]))]
    grid, grid_fit = grid_from_samples(relative, list(samples.compute), default)
    sizes = sorted(base)
    cost = fit_alpha_beta(sizes, [base[b] for b in sizes])
    report = {
        "default": default.to_json(),
        "grid_compute": grid_fit.to_json(),
        "alpha_beta": {"alpha_s": cost.model.alpha_s, "beta_s_per_byte": cost.model.beta_s_per_byte, "max_abs_rel_error": cost.max_abs_rel_error},
    }
    try:
        report["libra_compute"] = fit_libra_compute([c.threads for c, _ in samples.compute], [s for _, s in samples.compute]).to_json()
    except CommschedError as e:
        report["libra_compute"] = {"error": str(e)}
    configs = tuple(sorted({c for c, _ in samples.compute}, key=lambda c: (c.threads, c.blocks)))
    cluster = ClusterSpec(
        name=name,
        workers=samples.workers,
        allreduce=cost.model,
        source=(
            f"measured by commsched bench-resources on {_where(samples)}{' (' + samples.device + ')' if samples.device else ''}: "
            f"{len(configs)} configs, {len(sizes)} sizes; grid contention model, alpha-beta from the default {default.short}"
        ),
        device=samples.device,
        resources=ClusterResources(configs, default, grid),
    )
    return cluster, report


def _where(samples: ResourceSamples) -> str:
    if samples.gpus is not None and samples.gpus < samples.workers:
        return f"{samples.workers} ranks sharing {samples.gpus} GPU{'s' if samples.gpus > 1 else ''}"
    return f"{samples.workers} GPUs"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="commsched bench-resources",
        description="Measure all-reduce time and backward slowdown per NCCL config (under torchrun, CUDA), "
        "or fit sample files into a cluster with resources (--fit).",
    )
    p.add_argument("--out", required=True, help="samples JSON to write (measuring) or cluster JSON (with --fit)")
    p.add_argument("--fit", nargs="+", metavar="SAMPLES", help="fit these sample files (one per NCCL_NTHREADS) instead of measuring")
    p.add_argument("--default", default="2x256", help="the library default config BxT, what null resources get (default 2x256)")
    p.add_argument("--name", default="measured-resources", help="cluster name (with --fit)")
    p.add_argument("--blocks", default="1,2,3,4", help="block counts to measure (default 1,2,3,4)")
    p.add_argument("--repeats", type=int, default=11, help="timed repetitions per point (default 11)")
    p.add_argument(
        "--mechanism", choices=("tuner", "groups"), default="tuner",
        help="how blocks are set: commsched's NCCL tuner plugin (default; needs a C compiler) "
        "or process groups with min_ctas = max_ctas",
    )
    return p


def _config(text: str) -> ResourceConfig:
    try:
        b, t = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise CommschedError(f"a config is BxT, blocks x threads per block (e.g. 2x256), got {text!r}") from None
    return ResourceConfig(b, t)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; 0, or 2 with one line on stderr for a bad argument or a machine it cannot run on."""
    args = _parser().parse_args(argv)
    try:
        if args.fit:
            samples = merge([samples_from_json(json.loads(open(f).read()), f) for f in args.fit])
            cluster, report = fit_resource_cluster(samples, _config(args.default), args.name)
            doc = cluster.to_json()
            doc["fit"] = report
            write_json(args.out, doc)
            print(f"wrote {args.out}: {len(cluster.resources.allowed)} configs, default {cluster.resources.default.short}")
            return 0
        return _measure(args)
    except (CommschedError, OSError) as e:
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {e}", file=sys.stderr)
        return 2


def _measure(args: argparse.Namespace) -> int:
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
    if any(k not in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        raise CommschedError("run under torchrun, e.g. NCCL_NTHREADS=256 torchrun --nproc_per_node=2 -m commsched bench-resources --out s.json")
    blocks = [int(b) for b in args.blocks.split(",")]
    from commsched.runtime.gpu_bench import measure_resources

    samples = measure_resources(blocks, int(threads), DEFAULT_SIZES, args.repeats, args.mechanism)
    if int(os.environ["RANK"]) == 0:
        write_json(args.out, samples.to_json())
        print(f"wrote {args.out}")
    return 0


__all__ = ["ResourceSamples", "check_world_size", "fit_resource_cluster", "main", "merge", "samples_from_json"]
