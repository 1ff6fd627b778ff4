"""The two-line API for a user's own training script::

    plan = commsched.load_plan("plan.json")            # or commsched.plan_for(model, inputs, ...)
    model = commsched.DataParallel(model, plan)        # DDP semantics, the plan's buckets
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.cluster import ClusterSpec, preset
from commsched.io import load_cluster
from commsched.planners import make_plan, planner
from commsched.types import Plan


def plan_for(
    model: nn.Module,
    example_inputs: tuple,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    *,
    cluster: ClusterSpec | str = "v100-10gbe",
    strategy: str = "optimal",
    iters: int = 10,
    warmup: int = 3,
) -> Plan:
    """Measure ``model``'s profile here and plan it for ``cluster`` (a ClusterSpec, preset or file).

    In an initialised process group only rank 0 measures and plans, and every rank receives rank 0's
    plan: plans made from each rank's own timings could differ, and DataParallel refuses ranks that
    disagree.
    """
    from commsched.profile.measure import measure_profile

    spec = cluster if isinstance(cluster, ClusterSpec) else (load_cluster(cluster) if cluster.endswith(".json") else preset(cluster))
    chosen = planner(strategy)
    distributed = dist.is_available() and dist.is_initialized()
    plan: Plan | None = None
    if not distributed or dist.get_rank() == 0:
        profile = measure_profile(model, example_inputs, loss_fn, name=type(model).__name__, iters=iters, warmup=warmup)
        plan = make_plan(chosen, profile, spec.allreduce)
    if distributed:
        box = [plan]
        dist.broadcast_object_list(box, src=0)
        plan = box[0]
    assert plan is not None
    return plan
