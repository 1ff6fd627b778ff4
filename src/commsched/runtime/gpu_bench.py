"""The CUDA side of ``commsched bench-resources`` (see :mod:`commsched.runtime.bench_resources`):
all-reduce alone per block count and size, and a backward pass's slowdown beside all-reduces of
each block count. Needs CUDA and an initialised-by-torchrun environment; not run on a GPU here.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

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


def measure_resources(blocks: Sequence[int], threads: int, sizes: Sequence[int], repeats: int) -> ResourceSamples:
    """Initialise NCCL from torchrun's environment, measure, destroy the process group."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    try:
        return _measure(blocks, threads, sizes, repeats)
    finally:
        dist.destroy_process_group()


def _measure(blocks: Sequence[int], threads: int, sizes: Sequence[int], repeats: int) -> ResourceSamples:
    import torchvision

    configs = [ResourceConfig(b, threads) for b in blocks]
    groups = resource_groups(configs, backend="nccl")
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
