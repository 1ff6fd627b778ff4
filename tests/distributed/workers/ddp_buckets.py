"""Stock DistributedDataParallel with ``commsched.ddp_options(plan, model)``: log, per step, the
buckets DDP really reduces (a comm hook that logs, then all-reduces), for every strategy's plan of
several zoo models (estimated profiles, as ``commsched plan --model`` makes them)."""

from __future__ import annotations

import copy
import sys

import torch
import torch.distributed as dist
from torch import nn

import common
from commsched.runtime.lifecycle import end_process_group

MODELS = sys.argv[1].split(",")  # zoo models
STEPS = 3


def logging_hook(state, bucket):
    names, log = state
    log.append((bucket.index(), tuple(names[id(p)] for p in bucket.parameters())))
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def main() -> None:
    import commsched
    from commsched.cost.models import AlphaBeta
    from commsched.models.zoo import build_model, example_input, training_loss
    from commsched.planners import STRATEGIES, make_plan
    from commsched.profile.zoo_profile import zoo_profile

    rank, _ = common.init()
    out = {}
    for name in MODELS:
        image = None if name.startswith("bert") else 32
        # a cost where the strategies really differ (latency matters, so does bandwidth)
        prof = zoo_profile(name, 32, "V100", image_size=None if image is None else 64)
        torch.manual_seed(0)
        base = build_model(name)
        x = example_input(name, 2, image)
        for strategy, planner in STRATEGIES.items():
            plan = make_plan(planner, prof, AlphaBeta(2e-5, 2e-10))
            model = copy.deepcopy(base)
            ddp = nn.parallel.DistributedDataParallel(model, **commsched.ddp_options(plan, model))
            names = {id(p): n for n, p in model.named_parameters()}
            steps = []
            ddp.register_comm_hook((names, steps_log := []), logging_hook)
            for _ in range(STEPS):
                steps_log.clear()
                training_loss(name, ddp(*x)).backward()
                steps.append([list(b) for _, b in sorted(steps_log)])
            out[f"{name}/{strategy}"] = {
                "plan": [list(b.tensors) for b in plan.buckets],
                "steps": steps,
                # the reducer launches buckets in index order: the hook sees 0, 1, 2, ... as they come
                "indices_in_order": [i for i, _ in steps_log] == list(range(len(steps_log))),
            }
    common.emit({"rank": rank, "results": out})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
