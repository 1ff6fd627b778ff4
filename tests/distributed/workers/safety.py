"""Safety: ranks with different plans, a plan that does not fit, a rank that dies or hangs before or
while the model is wrapped, a rank that dies mid-training."""

from __future__ import annotations

import os
import sys
import time

import torch
from torch import nn

import common

CASE = sys.argv[1]


def main() -> None:
    import commsched.runtime.data_parallel as ddp_mod
    from commsched.errors import CommschedError
    from commsched.runtime.data_parallel import DataParallel
    from commsched.types import Bucket, Plan

    rank, world = common.init()
    torch.manual_seed(0)
    model = common.Net()
    plans = common.plans_for(model, ["wfbp", "synceasgd"])
    plan = plans["wfbp"]
    timeout = float(os.environ.get("DP_TIMEOUT", "10"))
    if CASE == "different_plans" and rank == 1:
        plan = plans["synceasgd"]
    if CASE == "plan_does_not_fit" and rank == 1:
        plan = Plan(plan.strategy, plan.model, plan.buckets[:-1])  # leaves a parameter out
    if CASE == "wrong_bytes":
        b = plan.buckets[0]
        plan = Plan(plan.strategy, plan.model, (Bucket(b.tensors, b.bytes * 2), *plan.buckets[1:]))
    if rank == 1:
        if CASE == "dies_before_wrap":
            os._exit(17)
        if CASE == "hangs_before_wrap":
            time.sleep(timeout + 20)
        if CASE == "dies_while_wrapping":
            def die(*a, **k):
                os._exit(17)

            ddp_mod._broadcast_state = die  # after the plan check, in the broadcast of rank 0's state
    t0 = time.perf_counter()
    try:
        dp = DataParallel(model, plan, timeout_s=timeout)
    except CommschedError as e:
        common.emit({"rank": rank, "error": str(e), "seconds": time.perf_counter() - t0, "steps": 0})
        return
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    try:
        for step in range(8):
            if CASE == "rank_dies" and rank == 1 and step == 3:
                os._exit(17)  # dies without a word, mid-training
            x, y = common.batch(rank, step)
            opt.zero_grad()
            t0 = time.perf_counter()
            nn.functional.cross_entropy(dp(x), y).backward()
            opt.step()
            steps += 1
    except Exception as e:  # noqa: BLE001 - mid-training failures are stock DDP's (gloo's) errors
        common.emit({"rank": rank, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0, "steps": steps})
        return
    common.emit({"rank": rank, "error": None, "steps": steps})


if __name__ == "__main__":
    main()
