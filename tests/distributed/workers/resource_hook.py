"""Stock DDP with ``ddp_options(plan)`` and :func:`commsched.runtime.resource_hook.resource_hook`
on gloo: log which group each bucket went to, and train beside stock DDP with the same caps and
no hook (same seed, same batches) to compare the parameters.

The argument is the backend given to ``init_process_group``: ``gloo`` (default), ``nccl``,
``cpu:gloo,cuda:nccl``, or ``default`` for none at all (``get_backend()`` is then ``"undefined"``).
Every backend but ``gloo`` trains on the rank's GPU. Also reported, right after the routing is
built and before the first step: the warm-up all-reduces it did, and on CUDA each group's NCCL
options and whether its communicator exists."""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import common
from commsched.runtime.lifecycle import end_process_group

STEPS = 3
CONFIGS = [{"blocks": 1, "threads_per_block": 64}, {"blocks": 2, "threads_per_block": 256}, None, {"blocks": 1, "threads_per_block": 128}]


def main() -> None:
    import commsched
    from commsched.runtime.resource_hook import resource_hook, resource_routing

    backend = sys.argv[1] if len(sys.argv) > 1 else "gloo"
    rank = int(os.environ["RANK"])
    device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        None if backend == "default" else backend, timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "60")))
    )
    torch.manual_seed(0)
    base = common.Net()
    plan = common.plans_for(base, ["wfbp"])["wfbp"]
    buckets = tuple(dataclasses.replace(b, resources=CONFIGS[i % len(CONFIGS)]) for i, b in enumerate(plan.buckets))
    plan = dataclasses.replace(plan, buckets=buckets)
    models, optims, ddps = [], [], []
    routing = None
    for kind in ("stock", "stock+hook", "commsched+hook"):
        model = copy.deepcopy(base).to(device)
        if kind == "commsched+hook":
            ddp = commsched.DataParallel(model, plan)
        else:
            ddp = nn.parallel.DistributedDataParallel(model, **commsched.ddp_options(plan, model))
        if kind == "stock+hook":
            routing = resource_routing(plan, model, log=True)
            before_step = _groups_now(routing)
            ddp.register_comm_hook(routing, resource_hook)
        elif kind == "commsched+hook":
            ddp.register_comm_hook(resource_routing(plan, model), resource_hook)
        models.append(model)
        ddps.append(ddp)
        optims.append(torch.optim.SGD(model.parameters(), lr=0.1))
    steps = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in common.batch(rank, step))
        for ddp, opt in zip(ddps, optims):
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        steps.append([list(e) for e in routing.log])
        routing.log.clear()
    names = {str((k.blocks, k.threads_per_block)): str(g.group_name) for k, g in routing.groups.items()}
    common.emit(
        {
            "rank": rank,
            "configs": [None if b.resources is None else [b.resources["blocks"], b.resources["threads_per_block"]] for b in plan.buckets],
            "groups": names,
            "default": str(dist.group.WORLD.group_name),
            "steps": steps,
            "max_rel_diff": common.max_rel_diff(models[1], models[0]),
            "max_rel_diff_commsched": common.max_rel_diff(models[2], models[0]),
            "get_backend": str(dist.get_backend()),
            "backend_config": str(dist.get_backend_config()),
            "cuda_backend": routing.cuda_backend,
            "warmed": [[w.config.blocks, w.config.threads_per_block, w.device, w.dtype, w.numel] for w in routing.warmed],
            "bucket_numels": [sum(dict(base.named_parameters())[n].numel() for n in b.tensors) for b in plan.buckets],
            "groups_before_step": before_step,
        }
    )
    end_process_group(clean=True)


def _groups_now(routing) -> dict:
    """Per group, on CUDA: its NCCL options (min_ctas, max_ctas) and whether its communicator exists."""
    out = {}
    for key, group in routing.groups.items():
        entry = {}
        if torch.cuda.is_available():
            try:
                backend = group._get_backend(torch.device("cuda"))
            except (RuntimeError, ValueError):  # no backend for CUDA in this group
                backend = None
            if isinstance(backend, dist.ProcessGroupNCCL):
                entry["ctas"] = [backend.options.config.min_ctas, backend.options.config.max_ctas]
                if hasattr(backend, "_is_initialized"):
                    entry["initialized"] = bool(backend._is_initialized())
        out[str((key.blocks, key.threads_per_block))] = entry
    return out


if __name__ == "__main__":
    main()
