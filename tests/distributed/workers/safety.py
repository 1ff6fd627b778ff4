"""Safety: ranks with different plans, a plan that does not fit, a rank that dies mid-training."""

from __future__ import annotations

import os
import sys
import time

import torch
from torch import nn

import common

CASE = sys.argv[1]  # different_plans | plan_does_not_fit | rank_dies


def main() -> None:
    from commsched.errors import CommschedError
    from commsched.runtime.data_parallel import DataParallel
    from commsched.types import Plan

    rank, world = common.init()
    torch.manual_seed(0)
    model = common.Net()
    plans = common.plans_for(model, ["wfbp", "synceasgd"])
    plan = plans["wfbp"]
    if CASE == "different_plans" and rank == 1:
        plan = plans["synceasgd"]
    if CASE == "plan_does_not_fit" and rank == 1:
        plan = Plan(plan.strategy, plan.model, plan.buckets[:-1])  # leaves a parameter out
    t0 = time.perf_counter()
    try:
        dp = DataParallel(model, plan, timeout_s=float(os.environ.get("DP_TIMEOUT", "10")))
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
    except CommschedError as e:
        common.emit({"rank": rank, "error": str(e), "seconds": time.perf_counter() - t0, "steps": steps})
        return
    common.emit({"rank": rank, "error": None, "steps": steps})


if __name__ == "__main__":
    main()
