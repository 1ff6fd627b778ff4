"""The user-facing two lines: commsched.plan_for / load_plan, then stock DDP with ddp_options or
commsched.DataParallel; with a parameter that is never used, through find_unused_parameters."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.runtime.lifecycle import end_process_group

# plain | ddp_options | unused | unused_refused | strategy_refused_on_1 (rank 1 misspells the strategy)
MODE = sys.argv[2] if len(sys.argv) > 2 else "plain"


class WithUnused(nn.Module):
    """common.Net with a layer that is never used, defined first: in DDP's reverse definition order
    (its bucket order with find_unused_parameters=True) it comes last, in ready order nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.never = nn.Linear(5, 5)
        self.net = common.Net()

    def forward(self, x):
        return self.net(x)


def main() -> None:
    import commsched
    from commsched.errors import CommschedError
    from commsched.formats.io import plan_to_json, write_json

    rank, _ = common.init()
    unused = MODE.startswith("unused")

    def make():
        torch.manual_seed(0)
        return WithUnused() if unused else common.Net()

    model = make()
    x, y = common.batch(rank, 0)
    try:
        plan = commsched.plan_for(
            model, (x,), lambda out: nn.functional.cross_entropy(out, y),
            strategy="optimla" if MODE == "strategy_refused_on_1" and rank == 1 else "optimal", iters=2, warmup=1,
            find_unused_parameters=MODE == "unused",
        )
    except CommschedError as e:
        common.emit({"rank": rank, "error": str(e)})
        end_process_group(clean=True)
        return
    if rank == 0:
        write_json(sys.argv[1], plan_to_json(plan))
    dist.barrier()
    loaded = commsched.load_plan(sys.argv[1])
    if MODE == "ddp_options":
        dp = DDP(model, **commsched.ddp_options(loaded, model))
    else:
        dp = commsched.DataParallel(model, loaded, find_unused_parameters=unused)
    ref_model = make()
    ref = DDP(ref_model, find_unused_parameters=unused)
    for wrapped, m in ((dp, model), (ref, ref_model)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for step in range(3):
            xb, yb = common.batch(rank, step)
            opt.zero_grad()
            nn.functional.cross_entropy(wrapped(xb), yb).backward()
            opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    exact = dp.expression.exact if isinstance(dp, commsched.DataParallel) else None
    common.emit({"rank": rank, "strategy": loaded.strategy, "recommended_over": loaded.params.get("recommended_over"), "buckets": len(loaded.buckets), "exact": exact,
                 "in_plan": sorted(loaded.tensor_order), "params": sorted(n for n, _ in model.named_parameters()),
                 "max_rel_diff": common.max_rel_diff(model, ref_model),
                 "same_on_all_ranks": all(torch.equal(everyone[0], e) for e in everyone)})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
