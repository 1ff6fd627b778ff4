"""A recorder attached inside a forward (as the tuner attaches it) misses that step's forward end:
the record says so (NaN), never a time made up from the stamp's initial value. On CUDA the made-up
value was a crash (``elapsed_time`` of a float): make gpu-check's NCCL tuning test found it."""

import math

import torch
import torch.distributed as dist
from torch import nn


def test_a_step_whose_forward_end_was_not_stamped_records_nan_and_the_next_steps_are_whole():
    from commsched.runtime.record import StepRecorder

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)))
        names = tuple(n for n, _ in ddp.module.named_parameters())
        box = {}

        def attach(module, _args):  # inside the DDP's forward, a call that began with no hooks on it
            if "rec" not in box:
                box["rec"] = StepRecorder(ddp, order=names)
                box["rec"]._on_forward_start(ddp, ())

        handle = ddp.module.register_forward_pre_hook(attach)
        for _ in range(3):
            ddp(torch.randn(4, 8)).sum().backward()
        handle.remove()
        records = box["rec"].records
        box["rec"].remove()
        assert len(records) == 3
        assert math.isnan(records[0].forward_end_s)
        assert all(0 < r.forward_end_s < r.step_end_s for r in records[1:])
    finally:
        dist.destroy_process_group()
