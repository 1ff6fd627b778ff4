"""The CUDA side of ``commsched bench-resources`` (the command is :mod:`commsched.cli.bench`, the
samples and their fit :mod:`commsched.cost.resource_samples`): all-reduce alone per block count and
size, and a backward pass's slowdown beside all-reduces of each block count. Needs CUDA and NCCL. Its timing helpers ran in make gpu-check's contention step on one H200; its NCCL
measuring needs two GPUs and has not run (its decisions are tested on the CPU).

Two ways to set the block count (``mechanism``):

- ``tuner`` (default): commsched's NCCL tuner plugin (:mod:`commsched.nccl_tuner`), one
  communicator per block count, each created while ``COMMSCHED_NCCL_TUNER_TABLE`` names a table
  that gives every all-reduce size that many channels. NCCL reads the plugin's answer per
  collective (the mechanism a plan uses through ``commsched nccl-tuner``); the plugin reads its
  table once per communicator, at the communicator's creation, which the first collective on the
  group forces here. ``NCCL_MIN_NCHANNELS`` is raised to the largest block count (unless set), as
  NCCL caps the plugin's channels at the communicator's.
- ``groups``: one communicator per block count with ``min_ctas = max_ctas`` (the resource hook's
  groups, :mod:`commsched.runtime.resource_hook`), for machines without a C compiler.

How it times (issue 31):

- **All-reduce**: a batch of :func:`batch_count` all-reduces launched back to back after a
  barrier, timed on the GPU from an event recorded behind a hold kernel (``torch.cuda._sleep``)
  that keeps the stream busy until the host has launched the whole batch, so the host's launch
  latency is not in the time (checked: the start event must not have fired when the launches are
  done, else the hold is doubled and the batch run again). The time is the batch's over its count,
  the slowest rank's.
- **Buffers** are zeros: a sum of zeros stays zero, where ``torch.ones`` summed again and again
  grows by the world size each time and reaches inf.
- **Backward**: the forward pass (and the loss) runs first, untimed; only ``loss.backward()`` is
  timed, alone and beside all-reduces queued on another stream.
- At least two ranks: on one rank NCCL runs no kernel for an in-place sum (src/enqueue.cc:3039,
  src/device/onerank.cu:49-55 in NCCL 2.30.7), so there is nothing to time.
- The samples say how many GPUs the ranks ran on (``gpus``, from each rank's device UUID), so
  timings of two ranks on one GPU (``NCCL_MULTI_RANK_GPU_ENABLE=1``, NCCL >= 2.30) are labelled.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.resource_models import ResourceConfig
from commsched.errors import CommschedError
from commsched.cost.resource_samples import ResourceSamples, check_world_size
from commsched.runtime.resource_hook import resource_groups

BACKWARD_BATCH = 32  # resnet18 at 224x224, as the resource-sharing paper's Figure 4 model
BATCH_BYTES = 64 << 20  # an all-reduce batch moves about this many bytes, at most MAX_BATCH calls
MAX_BATCH = 100
CONTENTION_BYTES = 64 << 20  # the all-reduces run beside the backward pass
CONTENTION_FACTOR = 4.0  # queue all-reduces for this many times the backward's time alone
MAX_CONTENTION_LAUNCHES = 10_000
HOLD_TRIES = 6  # the hold doubles at most this many times


def batch_count(nbytes: int) -> int:
    """All-reduces timed together at ``nbytes``: about :data:`BATCH_BYTES` in all, 1 to :data:`MAX_BATCH`
    (small ones in a long batch, so the barrier's skew between ranks is spread over many)."""
    if nbytes < 1:
        raise CommschedError(f"an all-reduce size must be at least 1 byte, got {nbytes!r}")
    return max(1, min(MAX_BATCH, BATCH_BYTES // nbytes))


def contention_launches(backward_s: float, allreduce_s: float) -> int:
    """How many all-reduces of ``allreduce_s`` each to queue beside a backward pass of ``backward_s``
    alone so they outlast it even if it slows down :data:`CONTENTION_FACTOR` times (plus two)."""
    if not (backward_s > 0 and allreduce_s > 0) or math.isinf(backward_s) or math.isinf(allreduce_s):
        raise CommschedError(f"times must be finite and > 0 s, got backward {backward_s!r}, all-reduce {allreduce_s!r}")
    return min(MAX_CONTENTION_LAUNCHES, math.ceil(CONTENTION_FACTOR * backward_s / allreduce_s) + 2)


def shared_gpus(ids: Sequence[object]) -> int:
    """How many distinct GPUs the ranks' device ids name (one per rank unless ranks share one)."""
    return len(set(ids))


def allreduce_buffer(nbytes: int, device: torch.device | str) -> torch.Tensor:
    """A float32 buffer of ``nbytes`` (at least one element) that stays finite however often it is
    summed: zeros."""
    return torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)


def _slowest(value: float, device: torch.device) -> float:
    """The slowest rank's value (what a step waits for)."""
    t = torch.tensor([value], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _barrier(device: torch.device) -> None:
    dist.barrier(device_ids=[device.index])
    torch.cuda.synchronize(device)


def cycles_per_s(device: torch.device | None = None) -> float:
    """The GPU's ``torch.cuda._sleep`` cycles per second, timed once (holds are given in cycles)."""
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    start.record(stream)
    torch.cuda._sleep(cycles)
    end.record(stream)
    end.synchronize()
    return cycles / max(start.elapsed_time(end) / 1e3, 1e-9)


def held_time_s(
    stream,
    launch: Callable[[], Callable[[], object] | None],
    count: int,
    cycles_per_s: float,
    agree: Callable[[bool], bool] = lambda held: held,
    before: Callable[[], None] | None = None,
) -> float:
    """Seconds per call of ``count`` calls of ``launch()`` queued on ``stream`` back to back, GPU time
    only (module docstring): a sleeping kernel holds the stream until the host has queued them all and
    the start event is behind it, so the host's launch latency is not timed. ``launch`` may return a
    callable that makes the stream wait for the call's work (an all-reduce's ``work.wait``).
    ``before`` runs before each try (a barrier); when the hold ran out before the last launch,
    ``agree`` (every rank's answer combined) says so, and the hold is doubled and the batch run again."""
    hold_s = 1e-3 + 50e-6 * count  # more than launching ``count`` calls takes the host
    for _ in range(HOLD_TRIES):
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(hold_s * cycles_per_s))
            start.record(stream)
            waits = [launch() for _ in range(count)]
            held = not start.query()  # the GPU was still holding when the last launch returned
            for wait in waits:
                if wait is not None:
                    wait()
            end.record(stream)
        end.synchronize()
        if agree(held):
            return start.elapsed_time(end) / 1e3 / count
        hold_s *= 2
    raise CommschedError(f"the host could not queue {count} launches within a {hold_s / 2:.3g} s hold of the GPU")


def time_allreduce_s(group, buf: torch.Tensor, count: int, device: torch.device, cycles_per_s: float) -> float:
    """One batch of ``count`` all-reduces of ``buf`` on ``group``, launched back to back after a
    barrier; seconds per all-reduce on this rank, GPU time only (:func:`held_time_s`). Every rank must
    accept a try, or the ranks would run different numbers of batches."""
    return held_time_s(
        torch.cuda.current_stream(device),
        lambda: dist.all_reduce(buf, group=group, async_op=True).wait,  # the current stream waits for NCCL's
        count,
        cycles_per_s,
        agree=lambda held: _slowest(0.0 if held else 1.0, device) == 0.0,
        before=lambda: _barrier(device),
    )


def backward_s(model: nn.Module, x: torch.Tensor, device: torch.device, before: Callable[[], None] | None = None) -> float:
    """Seconds of ``loss.backward()`` alone on this rank (the forward pass runs first, untimed);
    ``before`` runs after the forward pass and before the timed backward (it queues the contending
    all-reduces)."""
    model.zero_grad(set_to_none=True)
    loss = model(x).float().sum()
    torch.cuda.synchronize(device)
    if before is not None:
        before()
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    loss.backward()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _resnet18() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None)


def measure_resources(
    blocks: Sequence[int],
    threads: int,
    sizes: Sequence[int],
    repeats: int,
    mechanism: str = "tuner",
    *,
    world_size: int | None = None,
    rank: int | None = None,
    device: torch.device | int | None = None,
    init_method: str = "env://",
    model_builder: Callable[[], nn.Module] | None = None,
    input_shape: Sequence[int] = (BACKWARD_BATCH, 3, 224, 224),
) -> ResourceSamples:
    """Initialise NCCL, measure (module docstring), destroy the process group.

    ``world_size`` and ``rank`` default to torchrun's ``WORLD_SIZE`` and ``RANK``, ``device`` to
    ``cuda:(LOCAL_RANK mod the GPU count)``; two ranks may use one GPU (NCCL >= 2.30 with
    ``NCCL_MULTI_RANK_GPU_ENABLE=1``, src/init.cc:68; the samples' ``gpus`` then says 1). ``model_builder`` makes the model whose backward pass is timed
    (default torchvision's resnet18, on inputs of ``input_shape``)."""
    if mechanism not in ("tuner", "groups"):
        raise CommschedError(f"mechanism must be 'tuner' or 'groups', got {mechanism!r}")
    world_size = int(os.environ.get("WORLD_SIZE", "0")) if world_size is None else int(world_size)
    check_world_size(world_size)
    rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
    if not torch.cuda.is_available():
        raise CommschedError("bench-resources measures NCCL on GPUs and torch sees no CUDA device")
    if device is None:  # more ranks than GPUs share them (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1)
        device = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda" or device.index is None:
        raise CommschedError(f"bench-resources measures on a CUDA device with an index, got {device}")
    torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory(prefix="commsched-tuner-") as tmp:
        if mechanism == "tuner":
            _load_tuner(Path(tmp), max(blocks))  # before the first communicator: NCCL loads plugins once
        dist.init_process_group("nccl", init_method=init_method, world_size=world_size, rank=rank)
        try:
            # communicators are made at their first collective: make the default group's now, while
            # the table says NCCL's choice (its syncs and barriers are not what is measured)
            dist.all_reduce(torch.zeros(1, device=device))
            torch.cuda.synchronize(device)
            ids: list = [None] * world_size
            dist.all_gather_object(ids, _device_id(device))
            configs = [ResourceConfig(b, threads) for b in blocks]
            groups = _tuner_groups(configs, Path(tmp), device) if mechanism == "tuner" else resource_groups(configs, backend="nccl")
            model = (model_builder or _resnet18)().to(device)
            x = torch.randn(*input_shape, device=device)
            return _measure(configs, groups, sizes, repeats, device, model, x, shared_gpus(ids))
        finally:
            dist.destroy_process_group()


def _device_id(device: torch.device) -> tuple[str, str]:
    """This rank's GPU, the same string on every rank that uses it."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return (socket.gethostname(), str(uuid) if uuid is not None else f"index {device.index}")


def _load_tuner(tmp: Path, most_blocks: int) -> None:
    from commsched.nccl_tuner import LIBRARY_NAME, TABLE_ENV, TunerTable, build_plugin, table_text

    library = build_plugin(tmp / LIBRARY_NAME)
    (tmp / "default.txt").write_text(table_text(TunerTable(())))  # the default group: NCCL's choice everywhere
    os.environ["NCCL_TUNER_PLUGIN"] = str(library)
    os.environ[TABLE_ENV] = str(tmp / "default.txt")
    os.environ.setdefault("NCCL_MIN_NCHANNELS", str(most_blocks))


def _tuner_groups(configs: Sequence[ResourceConfig], tmp: Path, device: torch.device) -> dict:
    """One group per config, each communicator created under a table of its block count."""
    from commsched.nccl_tuner import TABLE_ENV, TunerRange, TunerTable, table_text

    groups = {}
    for cfg in configs:
        table = tmp / f"blocks-{cfg.blocks}.txt"
        table.write_text(table_text(TunerTable((TunerRange(0, 2**64 - 1, cfg.blocks),))))
        os.environ[TABLE_ENV] = str(table)
        group = dist.new_group(backend="nccl")
        dist.all_reduce(torch.zeros(1, device=device), group=group)  # creates the communicator now
        torch.cuda.synchronize(device)
        groups[cfg] = group
    return groups


def _measure(
    configs: Sequence[ResourceConfig], groups: dict, sizes: Sequence[int], repeats: int,
    device: torch.device, model: nn.Module, x: torch.Tensor, gpus: int,
) -> ResourceSamples:
    rate = cycles_per_s(device)
    allreduce = []
    for cfg in configs:
        group = groups[cfg]
        for size in sizes:
            buf = allreduce_buffer(size, device)
            for _ in range(3):  # warm-up: the communicator's first use of an algorithm connects it
                dist.all_reduce(buf, group=group)
            count = batch_count(size)
            times = [_slowest(time_allreduce_s(group, buf, count, device, rate), device) for _ in range(repeats)]
            allreduce.append((cfg, int(size), statistics.median(times)))
    for _ in range(3):
        backward_s(model, x, device)
    compute = []
    side = torch.cuda.Stream(device=device)
    big = allreduce_buffer(CONTENTION_BYTES, device)
    for cfg in configs:
        group = groups[cfg]
        one = _slowest(time_allreduce_s(group, big, batch_count(CONTENTION_BYTES), device, rate), device)
        for _ in range(repeats):
            alone = _slowest(backward_s(model, x, device), device)
            launches = contention_launches(alone, one)

            def queue(group=group, launches=launches) -> None:
                _barrier(device)  # both ranks start their all-reduces together
                with torch.cuda.stream(side):
                    for _ in range(launches):
                        dist.all_reduce(big, group=group, async_op=True)

            beside = backward_s(model, x, device, before=queue)
            torch.cuda.synchronize(device)  # the rest of the queued all-reduces
            compute.append((cfg, _slowest(beside, device) / alone))
    return ResourceSamples(
        dist.get_world_size(), tuple(allreduce), tuple(compute), torch.cuda.get_device_name(device), gpus
    )


__all__ = [
    "allreduce_buffer",
    "backward_s",
    "batch_count",
    "contention_launches",
    "measure_resources",
    "shared_gpus",
    "cycles_per_s",
    "held_time_s",
    "time_allreduce_s",
]
