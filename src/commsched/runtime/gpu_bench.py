"""The CUDA side of ``commsched bench-resources`` (see :mod:`commsched.runtime.bench_resources`):
all-reduce alone per block count and size, and a backward pass's slowdown beside all-reduces of
each block count. Needs CUDA and an initialised-by-torchrun environment; not run on a GPU here.

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
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from commsched.cost.contention import ResourceConfig
from commsched.runtime.bench_resources import ResourceSamples
from commsched.runtime.resource_hook import resource_groups

BACKWARD_BATCH = 32  # resnet18 at 224x224, as the resource-sharing paper's Figure 4 model


def _time_s(fn, stream: torch.cuda.Stream) -> float:
    """One call of ``fn`` timed with CUDA events on ``stream``."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _slowest(value: float) -> float:
    """The slowest rank's value (what a step waits for)."""
    t = torch.tensor([value], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure_resources(
    blocks: Sequence[int], threads: int, sizes: Sequence[int], repeats: int, mechanism: str = "tuner"
) -> ResourceSamples:
    """Initialise NCCL from torchrun's environment, measure, destroy the process group."""
    if mechanism not in ("tuner", "groups"):
        raise ValueError(f"mechanism must be 'tuner' or 'groups', got {mechanism!r}")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    with tempfile.TemporaryDirectory(prefix="commsched-tuner-") as tmp:
        if mechanism == "tuner":
            _load_tuner(Path(tmp), max(blocks))  # before the first communicator: NCCL loads plugins once
        dist.init_process_group("nccl")
        try:
            # communicators are made at their first collective: make the default group's now, while
            # the table says NCCL's choice (its syncs and barriers are not what is measured)
            dist.all_reduce(torch.ones(1, device="cuda"))
            torch.cuda.synchronize()
            configs = [ResourceConfig(b, threads) for b in blocks]
            groups = _tuner_groups(configs, Path(tmp)) if mechanism == "tuner" else resource_groups(configs, backend="nccl")
            return _measure(configs, groups, sizes, repeats)
        finally:
            dist.destroy_process_group()


def _load_tuner(tmp: Path, most_blocks: int) -> None:
    from commsched.nccl_tuner import LIBRARY_NAME, TABLE_ENV, TunerTable, build_plugin, table_text

    library = build_plugin(tmp / LIBRARY_NAME)
    (tmp / "default.txt").write_text(table_text(TunerTable(())))  # the default group: NCCL's choice everywhere
    os.environ["NCCL_TUNER_PLUGIN"] = str(library)
    os.environ[TABLE_ENV] = str(tmp / "default.txt")
    os.environ.setdefault("NCCL_MIN_NCHANNELS", str(most_blocks))


def _tuner_groups(configs: Sequence[ResourceConfig], tmp: Path) -> dict:
    """One group per config, each communicator created under a table of its block count."""
    from commsched.nccl_tuner import TABLE_ENV, TunerRange, TunerTable, table_text

    groups = {}
    for cfg in configs:
        table = tmp / f"blocks-{cfg.blocks}.txt"
        table.write_text(table_text(TunerTable((TunerRange(0, 2**64 - 1, cfg.blocks),))))
        os.environ[TABLE_ENV] = str(table)
        group = dist.new_group(backend="nccl")
        dist.all_reduce(torch.ones(1, device="cuda"), group=group)  # creates the communicator now
        torch.cuda.synchronize()
        groups[cfg] = group
    return groups


def _measure(configs: Sequence[ResourceConfig], groups: dict, sizes: Sequence[int], repeats: int) -> ResourceSamples:
    import torchvision

    stream = torch.cuda.current_stream()
    allreduce = []
    for cfg in configs:
        group = groups[cfg]
        for size in sizes:
            buf = torch.ones(max(1, size // 4), device="cuda")
            for _ in range(3):  # warm-up: the communicator's first use sets up its channels
                dist.all_reduce(buf, group=group)
            times = [_slowest(_time_s(lambda: dist.all_reduce(buf, group=group), stream)) for _ in range(repeats)]
            allreduce.append((cfg, int(size), statistics.median(times)))
    model = torchvision.models.resnet18(weights=None).cuda()
    x = torch.randn(BACKWARD_BATCH, 3, 224, 224, device="cuda")

    def backward() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    for _ in range(3):
        backward()
    torch.cuda.synchronize()
    compute = []
    side = torch.cuda.Stream()
    big = torch.ones((64 << 20) // 4, device="cuda")
    for cfg in configs:
        group = groups[cfg]
        one = _slowest(_time_s(lambda: dist.all_reduce(big, group=group), stream))
        for _ in range(repeats):
            alone = _slowest(_time_s(backward, stream))
            dist.barrier()
            # all-reduces queued on another stream for longer than the backward pass could take
            # beside them (4x alone), so it runs beside them from start to end
            with torch.cuda.stream(side):
                for _ in range(int(4 * alone / max(one, 1e-5)) + 2):
                    dist.all_reduce(big, group=group, async_op=True)
            beside = _time_s(backward, stream)
            torch.cuda.synchronize()
            compute.append((cfg, _slowest(beside) / alone))
    return ResourceSamples(dist.get_world_size(), tuple(allreduce), tuple(compute), torch.cuda.get_device_name())
