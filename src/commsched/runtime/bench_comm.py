"""Measure the all-reduce of a real process group and fit a cluster cost model to it (torch.distributed).

Run it under torchrun, one process per worker (the command is :mod:`commsched.cli.bench`)::

    torchrun --nproc_per_node=2 -m commsched bench-comm --out cluster.json [--samples samples.json]
             [--max-mb 64] [--repeats 11] [--warmup 3]

Each size is timed as MG-WFBP Section 6.2 (Fig. 4) measures its clusters: all-reduces of one message
of M bytes, repeated, and T(M) = a + b M fitted to the results (MG-WFBP Eq. 10); OSF Eq. 18's
piecewise model is fitted as well and the better of the two goes into the ``commsched.cluster/v1``
file, with both fits and the raw samples beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from commsched.cost.cluster import ClusterSpec
from commsched.cost.fit import FitReport, fit_alpha_beta, fit_piecewise_auto
from commsched.errors import CommschedError
from commsched.report.progress import progress as progress_bar
from commsched.runtime.lifecycle import process_group, torchrun_backend
from commsched.formats.io import write_json

__all__ = ["CommSamples", "bench_allreduce", "default_sizes", "fit_cluster", "human_bytes", "measure_cluster"]

MIB = 1 << 20
DEFAULT_MAX_BYTES = 256 * MIB
# Below this, all-reduces are latency-bound and cost next to nothing to time, so sizes are dense
# (powers of two) where the piecewise model's threshold (a link's bandwidth-delay product, tens of
# KB to about a MB) is to be found; above it time grows with size, so powers of four keep the run short.
DENSE_UNTIL_BYTES = 1 * MIB
FIT_CRITERION = "max_abs_rel_error"


@dataclass(frozen=True)
class CommSamples:
    """All-reduce times of one process group, one entry per message size (seconds, bytes).

    ``time_s`` is the slowest rank's ``statistic`` (``"median"`` or ``"mean"``) over the timed
    repeats (each rank's statistic, then the maximum over ranks: a collective ends for everyone only
    when it ends for the last rank); ``min_s`` and ``max_s`` are the fastest and slowest single
    repeat on any rank, for the spread.
    """

    backend: str
    world_size: int
    sizes_bytes: tuple[int, ...]
    time_s: tuple[float, ...]
    min_s: tuple[float, ...]
    max_s: tuple[float, ...]
    statistic: str = "median"

    def __post_init__(self) -> None:
        if self.statistic not in ("median", "mean"):
            raise CommschedError(f"comm samples statistic must be 'median' or 'mean', got {self.statistic!r}")
        if not isinstance(self.backend, str) or not self.backend:
            raise CommschedError(f"comm samples backend must be a non-empty string, got {self.backend!r}")
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise CommschedError(f"comm samples world_size must be a positive integer, got {self.world_size!r}")
        for what in ("sizes_bytes", "time_s", "min_s", "max_s"):
            object.__setattr__(self, what, tuple(getattr(self, what)))
        n = len(self.sizes_bytes)
        lengths = {what: len(getattr(self, what)) for what in ("time_s", "min_s", "max_s")}
        if n == 0 or any(v != n for v in lengths.values()):
            raise CommschedError(f"comm samples need one time per size, got {n} sizes and {lengths}")
        for s in self.sizes_bytes:
            if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
                raise CommschedError(f"comm sample sizes must be positive whole bytes, got {s!r}")
        if any(b <= a for a, b in zip(self.sizes_bytes, self.sizes_bytes[1:])):
            raise CommschedError(f"comm sample sizes must be strictly increasing, got {list(self.sizes_bytes)}")
        for what in ("time_s", "min_s", "max_s"):
            for size, t in zip(self.sizes_bytes, getattr(self, what)):
                if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t == float("inf"):
                    raise CommschedError(f"comm sample {what} at {size} bytes must be finite seconds >= 0, got {t!r}")
        object.__setattr__(self, "time_s", tuple(float(t) for t in self.time_s))
        object.__setattr__(self, "min_s", tuple(float(t) for t in self.min_s))
        object.__setattr__(self, "max_s", tuple(float(t) for t in self.max_s))

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "world_size": self.world_size,
            "sizes_bytes": list(self.sizes_bytes),
            "statistic": self.statistic,
            "time_s": list(self.time_s),
            "min_s": list(self.min_s),
            "max_s": list(self.max_s),
        }

    @classmethod
    def from_json(cls, doc: object) -> CommSamples:
        if not isinstance(doc, dict):
            raise CommschedError(f"comm samples must be a JSON object, got {type(doc).__name__}")
        missing = [k for k in ("backend", "world_size", "sizes_bytes", "time_s", "min_s", "max_s") if k not in doc]
        if missing:
            raise CommschedError(f"comm samples lack field(s) {', '.join(missing)}")
        for k in ("sizes_bytes", "time_s", "min_s", "max_s"):
            if not isinstance(doc[k], list):
                raise CommschedError(f"comm samples field {k!r} must be a list, got {type(doc[k]).__name__}")
        return cls(
            backend=doc["backend"],
            world_size=doc["world_size"],
            sizes_bytes=tuple(doc["sizes_bytes"]),
            time_s=tuple(doc["time_s"]),
            min_s=tuple(doc["min_s"]),
            max_s=tuple(doc["max_s"]),
            statistic=doc.get("statistic", "median"),
        )


def default_sizes(max_bytes: int = DEFAULT_MAX_BYTES, min_bytes: int = 4) -> tuple[int, ...]:
    """Message sizes from ``min_bytes`` to ``max_bytes``, log-spaced.

    Powers of two from ``min_bytes`` (itself a power of two) up to 1 MiB, then powers of four
    (4, 16, 64, 256 MiB); ``max_bytes`` itself ends the list when it is not on that grid. With the
    defaults: 4 B, 8 B, ..., 1 MiB, 4 MiB, 16 MiB, 64 MiB, 256 MiB (23 sizes).
    """
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 1 or min_bytes & (min_bytes - 1):
        raise CommschedError(f"min_bytes must be a positive power of two, got {min_bytes!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < min_bytes:
        raise CommschedError(f"max_bytes must be a whole number of bytes >= {min_bytes}, got {max_bytes!r}")
    sizes = []
    s = min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= 2 if s < DENSE_UNTIL_BYTES else 4
    last = max_bytes - max_bytes % min_bytes  # whole elements of the widest dtype the caller allows
    if last > sizes[-1]:
        sizes.append(last)
    return tuple(sizes)


def _check_count(what: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CommschedError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def human_bytes(n: int) -> str:
    """``n`` bytes in the largest of GiB, MiB, KiB that is at least 1 (two decimals unless whole), else B."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{n} B"


def _bench_device(backend: str) -> torch.device:
    """NCCL reduces CUDA tensors only; every other backend (gloo, mpi) is timed on host tensors."""
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def bench_allreduce(
    sizes_bytes: Sequence[int] | None = None,
    *,
    warmup: int = 3,
    repeats: int = 11,
    dtype: torch.dtype = torch.float32,
    group: object = None,
    progress: bool = True,
    max_bytes: int | None = None,
) -> CommSamples:
    """Time ``dist.all_reduce`` (SUM) of one message per size in the current process group.

    Must be called by every rank of ``group`` (default: the world) after ``init_process_group``,
    with any backend. ``sizes_bytes`` default: :func:`default_sizes` up to ``max_bytes`` (default
    256 MiB; lower it on a slow link); given sizes are sorted, deduplicated and must be whole
    multiples of ``dtype``'s element size. Giving both is an error.

    For each size a tensor of zeros lives on the backend's device (CUDA for NCCL, else the CPU);
    ``warmup`` un-timed all-reduces set up connections and buffers, then ``repeats`` timed ones each
    start after a ``dist.barrier`` so the ranks start together. Times are host ``perf_counter``
    intervals; on CUDA the device is synchronised before and after each all-reduce, so they are the
    all-reduce's completion time as the training loop would see it. Each rank takes the median of its
    repeats; then three all-reduces (MAX of medians, MIN and MAX of single repeats) combine the ranks,
    so every rank returns the same :class:`CommSamples`. ``progress`` shows a rich bar on stderr of
    global rank 0 only.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise CommschedError(
            "bench_allreduce needs an initialized torch.distributed process group "
            "(call dist.init_process_group first, e.g. under torchrun)"
        )
    _check_count("warmup", warmup, 0)
    _check_count("repeats", repeats, 1)
    if not isinstance(dtype, torch.dtype):
        raise CommschedError(f"dtype must be a torch.dtype, got {dtype!r}")
    element_bytes = torch.empty((), dtype=dtype).element_size()
    if sizes_bytes is None:
        sizes = default_sizes(
            DEFAULT_MAX_BYTES if max_bytes is None else max_bytes, min_bytes=max(4, element_bytes)
        )
    else:
        if max_bytes is not None:
            raise CommschedError("give sizes_bytes or max_bytes, not both")
        for s in sizes_bytes:
            if isinstance(s, bool) or not isinstance(s, int) or s <= 0 or s % element_bytes:
                raise CommschedError(
                    f"all-reduce sizes must be positive whole multiples of {element_bytes} bytes "
                    f"({str(dtype).removeprefix('torch.')} elements), got {s!r}"
                )
        sizes = tuple(sorted(set(sizes_bytes)))
        if not sizes:
            raise CommschedError("no all-reduce sizes given")

    backend = str(dist.get_backend(group))
    world_size = dist.get_world_size(group)
    device = _bench_device(backend)
    on_cuda = device.type == "cuda"

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize(device)

    medians: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    with progress_bar(progress and dist.get_rank() == 0, "all-reduce", len(sizes)) as bar:
        for size in sizes:
            bar.label(f"all-reduce {human_bytes(size):>9}")
            buf = torch.zeros(size // element_bytes, dtype=dtype, device=device)
            for _ in range(warmup):
                dist.all_reduce(buf, group=group)
            sync()
            times = []
            for _ in range(repeats):
                dist.barrier(group=group)
                sync()
                start = time.perf_counter()
                dist.all_reduce(buf, group=group)
                sync()
                times.append(time.perf_counter() - start)
            del buf
            bar.advance()
            medians.append(statistics.median(times))
            lows.append(min(times))
            highs.append(max(times))

    combined = []
    for values, op in ((medians, dist.ReduceOp.MAX), (lows, dist.ReduceOp.MIN), (highs, dist.ReduceOp.MAX)):
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op, group=group)
        combined.append(tuple(float(v) for v in t.cpu().tolist()))
    return CommSamples(
        backend=backend,
        world_size=world_size,
        sizes_bytes=tuple(sizes),
        time_s=combined[0],
        min_s=combined[1],
        max_s=combined[2],
    )


def _fit_json(report: FitReport) -> dict:
    return {"allreduce": report.model.to_json(), "nondecreasing": report.model.nondecreasing, **report.to_json()}


# a chosen fit this far off at some size describes the samples poorly: said, not refused (the file is
# still what was measured; a user may only want the small sizes)
POOR_FIT_REL_ERROR = 0.5


def fit_warnings(chosen: FitReport, sizes: Sequence[int]) -> list[str]:
    """What a user should know before planning with the fit: a worst relative error above
    ``POOR_FIT_REL_ERROR``, or a fit whose time at the largest size is not above its time at the
    smallest (the times did not grow with the size), which plans as if bytes were free."""
    out = []
    per_byte = chosen.model.time_s(sizes[-1]) - chosen.model.time_s(sizes[0]) if len(sizes) > 1 else 0.0
    if len(sizes) > 1 and per_byte <= 0:
        out.append(
            f"the fit's time does not grow from {human_bytes(sizes[0])} to {human_bytes(sizes[-1])}: plans made with it treat a "
            "large bucket as no dearer than a small one; measure larger sizes (--max-mb 64 or more) on an idle machine"
        )
    if chosen.max_abs_rel_error > POOR_FIT_REL_ERROR:
        out.append(
            f"the fit is {chosen.max_abs_rel_error:.0%} off at some measured size: the samples are noisy or span too few "
            "sizes; measure again (more --repeats, larger --max-mb) before planning with this file"
        )
    return out


def fit_cluster(samples: CommSamples, name: str = "measured") -> tuple[ClusterSpec, dict]:
    """A cluster from measured all-reduce times: the better of alpha-beta and piecewise, and both fits.

    Fits ``samples.time_s`` with :func:`~commsched.cost.fit.fit_alpha_beta` (MG-WFBP Eq. 10) and
    :func:`~commsched.cost.fit.fit_piecewise_auto` (OSF Eq. 18, threshold picked from the samples)
    and keeps the one with the smaller worst relative error (``max_abs_rel_error``), alpha-beta on a
    tie, when there are too few sizes for the piecewise fit, or when the piecewise fit predicts a
    time <= 0 at a measured size (its two free lines can dip below zero). The relative error, not the RMSE,
    decides because the samples span many orders of magnitude: RMSE is dominated by the largest
    messages, so a model could be several times off for every small message and still win on it,
    while buckets range from a few bytes to hundreds of megabytes and each one's all-reduce counts.

    The cluster has ``workers = samples.world_size`` (a fitted model is fixed to that count) and a
    ``source`` naming the measurement. The report holds the criterion, the choice, the sizes and
    both fits' parameters, RMSE, worst relative error and residuals (predicted - measured).
    """
    if not isinstance(samples, CommSamples):
        raise CommschedError(f"fit_cluster needs CommSamples, got {type(samples).__name__}")
    sizes, times = samples.sizes_bytes, samples.time_s
    if any(t <= 0 for t in times):
        raise CommschedError(f"measured all-reduce times must be > 0 seconds to fit, got {list(times)}")
    alpha_beta = fit_alpha_beta(sizes, times)
    report: dict = {
        "criterion": FIT_CRITERION,
        "sizes_bytes": list(sizes),
        "alpha_beta": _fit_json(alpha_beta),
    }
    chosen, chosen_name = alpha_beta, "alpha_beta"
    try:
        piecewise = fit_piecewise_auto(sizes, times)
    except CommschedError as e:
        report["piecewise"] = {"error": str(e)}
    else:
        report["piecewise"] = _fit_json(piecewise)
        # Two free lines can dip below zero at the small end; a cost model must never predict a
        # negative time, whatever its error elsewhere (alpha-beta's a and b are clipped at 0).
        positive = bool((piecewise.model.times_s(np.asarray(sizes)) > 0).all())
        report["piecewise"]["positive_at_samples"] = positive
        if positive and piecewise.max_abs_rel_error < alpha_beta.max_abs_rel_error:
            chosen, chosen_name = piecewise, "piecewise"
    report["chosen"] = chosen_name
    report["warnings"] = fit_warnings(chosen, sizes)
    cluster = ClusterSpec(
        name=name,
        workers=samples.world_size,
        allreduce=chosen.model,
        source=(
            f"measured by commsched.runtime.bench_comm: all_reduce on {samples.backend} with "
            f"{samples.world_size} ranks, {len(sizes)} sizes from {human_bytes(sizes[0])} to "
            f"{human_bytes(sizes[-1])}, slowest rank's {samples.statistic}; {chosen_name} fit chosen by "
            f"{FIT_CRITERION} ({chosen.max_abs_rel_error:.1%})"
        ),
    )
    return cluster, report


def measure_cluster(
    max_bytes: int = DEFAULT_MAX_BYTES, *, warmup: int = 3, repeats: int = 11, name: str = "measured", progress: bool = True,
) -> tuple[CommSamples, ClusterSpec, dict] | None:
    """``commsched bench-comm`` under torchrun: every rank joins the process group of torchrun's
    environment (NCCL when CUDA is available, else gloo), times :func:`bench_allreduce` up to
    ``max_bytes``, and rank 0 fits (:func:`fit_cluster`). The process group is ended before it
    returns: (samples, cluster, fit report) on rank 0, None on the other ranks."""
    with process_group(torchrun_backend()):
        samples = bench_allreduce(max_bytes=max_bytes, warmup=warmup, repeats=repeats, progress=progress)
        if dist.get_rank() != 0:
            return None
        cluster, report = fit_cluster(samples, name=name)
    return samples, cluster, report
