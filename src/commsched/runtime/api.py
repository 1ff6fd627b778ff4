"""The two-line API for a user's own training script::

    plan = commsched.load_plan("plan.json")            # or commsched.plan_for(model, inputs, ...)
    model = DistributedDataParallel(model, **commsched.ddp_options(plan, model))   # stock DDP, the plan's buckets

or ``commsched.DataParallel(model, plan)``, the same stock DDP with the plan checked on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from dataclasses import replace

from commsched.cost.cluster import ClusterSpec, preset
from commsched.errors import CommschedError
from commsched.io import load_cluster
from commsched.planners import make_plan, planner
from commsched.types import ModelProfile, Plan, TensorSpec


def plan_for(
    model: nn.Module,
    example_inputs: tuple,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    *,
    cluster: ClusterSpec | str = "v100-10gbe",
    strategy: str = "optimal",
    iters: int = 10,
    warmup: int = 3,
    find_unused_parameters: bool = False,
) -> Plan:
    """Measure ``model``'s profile here and plan it for ``cluster`` (a ClusterSpec, preset or file).

    In an initialised process group only rank 0 measures and plans, and every rank receives rank 0's
    plan: plans made from each rank's own timings could differ, and DataParallel refuses ranks that
    disagree.

    Trainable parameters that got no gradient in the measured steps are an error naming them,
    unless ``find_unused_parameters=True`` (then train with DDP's flag of the same name): they join
    the plan right after the first gradient, with no compute of their own, which is where DDP marks
    them ready (at its first gradient hook of the step).
    """
    from commsched.profile.measure import measure_profile

    spec = cluster if isinstance(cluster, ClusterSpec) else (load_cluster(cluster) if cluster.endswith(".json") else preset(cluster))
    chosen = planner(strategy)
    distributed = dist.is_available() and dist.is_initialized()
    plan: Plan | None = None
    error: str | None = None
    if not distributed or dist.get_rank() == 0:
        try:
            profile = measure_profile(model, example_inputs, loss_fn, name=type(model).__name__, iters=iters, warmup=warmup)
            profile = with_unused_parameters(profile, model, find_unused_parameters)
            plan = make_plan(chosen, profile, spec.allreduce)
        except CommschedError as e:
            if not distributed:
                raise
            error = str(e)  # every rank raises it: a rank left waiting for the plan would hang
    if distributed:
        box = [(plan, error)]
        dist.broadcast_object_list(box, src=0)
        plan, error = box[0]
        if error is not None:
            raise CommschedError(f"rank {dist.get_rank()}: plan_for failed on rank 0: {error}")
    assert plan is not None
    return plan


def with_unused_parameters(profile: ModelProfile, model: nn.Module, allowed: bool) -> ModelProfile:
    """The profile with the trainable parameters it lacks (no gradient when measured) placed after
    its first tensor with no backward time, or an error naming them when not ``allowed``."""
    have = set(profile.names)
    unused = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p.numel() and n not in have]
    if not unused:
        return profile
    if not allowed:
        names = ", ".join(n for n, _ in unused[:3]) + (f" and {len(unused) - 3} more" if len(unused) > 3 else "")
        raise CommschedError(
            f"{len(unused)} trainable parameter(s) got no gradient in the measured steps ({names}); if they are "
            f"really unused, plan with find_unused_parameters=True and train DDP with the same flag"
        )
    extra = tuple(TensorSpec(n, p.numel() * p.element_size(), 0.0) for n, p in unused)
    return replace(profile, tensors=(profile.tensors[0], *extra, *profile.tensors[1:]))
