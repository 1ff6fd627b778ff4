"""A tuned job's first plan against stock DDP and two caps, outside the tuner (issue 33, item 5).

The 500-step tuned resnet18 job of ac51192 measured its optimum (4 buckets: 2.1, 9.4, 9.4, 25.8 MB)
at 0.841x of stock DDP in its trial. This rebuilds that plan from the job's stored profile and fit
and times it beside stock DDP's defaults and ``bucket_cap_mb`` 1 and 10, each on its own copy of the
model, in interleaved blocks of 4 training steps after a barrier and one untimed step (a rotated
order each round); ``--shared`` also runs stock DDP and the plan as two DDPs over one module, as
the tuner does. Prints each variant's median step (rank 0).

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/plan_vs_caps.py \
        benchmarks/data/tune/spread/resnet18-500-ac51192.json 8 [--shared]
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _rounds import setup

from commsched.calibrate.in_job import Busy, fit_cost, semantics_for
from commsched.formats.io import profile_from_json
from commsched.models.zoo import training_loss
from commsched.planners import planner_for
from commsched.planners.base import make_plan
from commsched.runtime.data_parallel import ddp_options


@dataclass(frozen=True)
class Fixed:
    """The bucket ends the stored job planned."""

    name: str
    fixed_ends: tuple

    def ends(self, profile, cost):
        return self.fixed_ends


def stored_plan(path: str):
    """The optimum the stored job tried, planned again from its profile and fitted points."""
    doc = json.load(open(path))["tuning"][0]["predicted"]
    profile = profile_from_json(doc["profile"])
    cost, _, _, m = fit_cost([Busy(int(a), int(b), s, u) for a, b, s, u in doc["model"]["points"]])
    ends = planner_for("optimal", semantics_for("gloo", m)).ends(profile, cost)
    return make_plan(Fixed("stored", tuple(ends)), profile, cost)


def main() -> None:
    path, rounds, shared = sys.argv[1], int(sys.argv[2]), "--shared" in sys.argv
    name, batch, image, _, model, inputs = setup(["", "resnet18", "16", "64", str(rounds)])
    plan = stored_plan(path)

    def sgd(m):
        return torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)

    ddps = {}
    for k, kw in {"stock": {}, "cap1": {"bucket_cap_mb": 1}, "cap10": {"bucket_cap_mb": 10}}.items():
        m = copy.deepcopy(model)
        ddps[k] = (DDP(m, **kw), sgd(m))
    m = copy.deepcopy(model)
    ddps["plan"] = (DDP(m, **ddp_options(plan, m)), sgd(m))
    if shared:
        m = copy.deepcopy(model)
        opt = sgd(m)
        ddps["shared_stock"] = (DDP(m), opt)
        ddps["shared_plan"] = (DDP(m, init_sync=False, **ddp_options(plan, m)), opt)

    def step(k):
        ddp, opt = ddps[k]
        opt.zero_grad(set_to_none=True)
        training_loss(name, ddp(*inputs)).backward()
        opt.step()

    def block(k, n=4):
        dist.barrier()
        step(k)
        dist.barrier()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            step(k)
            times.append(time.perf_counter() - t)
        return times

    keys = list(ddps)
    for k in keys:
        block(k, 2)
    got = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            got[k] += block(k)
    if dist.get_rank() == 0:
        print("plan buckets (bytes):", [b.bytes for b in plan.buckets])
        for k, v in got.items():
            print(f"{k:13s} median {statistics.median(v) * 1e3:6.1f} ms  min {min(v) * 1e3:6.1f}  max {max(v) * 1e3:6.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
