"""Samples of ``commsched bench-resources`` (all-reduce time per config and size, backward slowdown
per config) and their fit into a cluster with per-all-reduce resources (issue 13, item 3). Pure: the
measuring is :mod:`commsched.runtime.gpu_bench` (CUDA), the command :mod:`commsched.cli.bench`.

Measuring (``torchrun --nproc_per_node=N -m commsched bench-resources --out samples.json``, CUDA and
NCCL only, N >= 2): threads per block are NCCL_NTHREADS, one value per process, so the command runs
once per thread count and :func:`fit_sample_files` merges the files
(``commsched bench-resources --fit a.json b.json ... --out cluster.json``, any machine).

:func:`fit_resource_cluster` makes the measured-grid contention model of
:mod:`commsched.cost.resource_models` (all-reduce time relative to the default config at each size,
compute slowdown per config), an alpha-beta all-reduce cost from the default config's times, and
reports LIBRA's Eq. 5 fitted to the same compute samples beside the grid.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from commsched.cost.cluster import ClusterSpec
from commsched.cost.resource_models import (
    ClusterResources,
    ResourceConfig,
    config_from_json,
    fit_libra_compute,
    grid_from_samples,
)
from commsched.cost.fit import fit_alpha_beta
from commsched.errors import CommschedError

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


def load_samples(path: str | Path) -> ResourceSamples:
    """A ``commsched.resource_samples/v1`` file; errors name the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CommschedError(f"{p}: not JSON ({e})") from None
    return samples_from_json(doc, str(p))


def config_from_text(text: str) -> ResourceConfig:
    """``BxT`` (blocks x threads per block, e.g. ``2x256``) as a :class:`ResourceConfig`."""
    try:
        b, t = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise CommschedError(f"a config is BxT, blocks x threads per block (e.g. 2x256), got {text!r}") from None
    return ResourceConfig(b, t)


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


def fit_sample_files(paths: Sequence[str | Path], default: ResourceConfig, name: str = "measured-resources") -> tuple[ClusterSpec, dict]:
    """``commsched bench-resources --fit``: the sample files (one per NCCL_NTHREADS value, one
    machine) merged and fitted by :func:`fit_resource_cluster`; the cluster and its fit report (the
    cluster file is ``{**cluster.to_json(), "fit": report}``)."""
    return fit_resource_cluster(merge([load_samples(p) for p in paths]), default, name)


def _where(samples: ResourceSamples) -> str:
    if samples.gpus is not None and samples.gpus < samples.workers:
        return f"{samples.workers} ranks sharing {samples.gpus} GPU{'s' if samples.gpus > 1 else ''}"
    return f"{samples.workers} GPUs"


__all__ = [
    "DEFAULT_SIZES", "SAMPLES_SCHEMA", "ResourceSamples", "check_world_size", "config_from_text", "fit_resource_cluster",
    "fit_sample_files", "load_samples", "merge", "samples_from_json",
]
