"""The user-facing two lines: commsched.plan_for / load_plan, then commsched.DataParallel."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn

import common
from commsched.runtime.lifecycle import end_process_group


def main() -> None:
    import commsched
    from commsched.io import plan_to_json, write_json

    rank, _ = common.init()
    torch.manual_seed(0)
    model = common.Net()
    x, y = common.batch(rank, 0)
    plan = commsched.plan_for(model, (x,), lambda out: nn.functional.cross_entropy(out, y), strategy="optimal", iters=2, warmup=1)
    if rank == 0:
        write_json(sys.argv[1], plan_to_json(plan))
    dist.barrier()
    loaded = commsched.load_plan(sys.argv[1])
    dp = commsched.DataParallel(model, loaded)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        xb, yb = common.batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(dp(xb), yb).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    common.emit({"rank": rank, "strategy": loaded.strategy, "buckets": len(loaded.buckets),
                 "same_on_all_ranks": all(torch.equal(everyone[0], e) for e in everyone)})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
