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

from commsched.cost.cluster import ClusterSpec
from commsched.errors import CommschedError, check_flags
from commsched.models.params import check_module
from commsched.models.inputs import Inputs, check_loss
from commsched.formats.specs import cluster_from_spec
from commsched.planners import DDP, MIN_GAIN_OVER_DDP, make_plan, planner, planner_for
from commsched.sim.semantics import NCCL, Semantics
from commsched.runtime.ddp_plan import with_unused_parameters
from commsched.types import Plan


def plan_for(
    model: nn.Module,
    example_inputs: Inputs,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    *,
    cluster: ClusterSpec | str = "v100-10gbe",
    strategy: str = "optimal",
    iters: int = 10,
    warmup: int = 3,
    find_unused_parameters: bool = False,
    semantics: Semantics | None = None,
    min_gain: float = MIN_GAIN_OVER_DDP,
    batch_size: int | None = None,
) -> Plan:
    """Measure ``model``'s profile here (training steps on ``example_inputs``: a tuple or a tensor,
    positional, or a dict, by keyword) and plan it for ``cluster`` (a ClusterSpec, preset or file)
    and ``semantics`` (default: gloo's threads in a gloo process group, else NCCL's serial run).
    ``batch_size`` (the profile's label; the timings are the inputs' own) defaults to the leading
    dimension of the first tensor among the inputs: give it where no input is a tensor with one
    (a ``PackedSequence``, a list of tensors).

    In an initialised process group only rank 0 measures and plans, and every rank receives rank 0's
    plan, or rank 0's error: plans made from each rank's own timings could differ, and DataParallel
    refuses ranks that disagree.

    The plan returned is what to run. With ``optimal`` that is the optimum only if it is predicted at
    least ``min_gain`` (a fraction) faster than stock DDP's default buckets, the error measured of
    such predictions; else it is stock DDP's default buckets (strategy ``"ddp"``, with the optimum's
    name and the reason in ``params["recommended_over"]`` and ``params["reason"]``:
    :func:`commsched.planners.compare.recommend`). Not with ``find_unused_parameters=True``: DDP then lays
    its default caps over the definition order, a layout :class:`Optimal` does not compute, so the
    plan is the optimum.

    Trainable parameters that got no gradient in the measured steps are an error naming them,
    unless ``find_unused_parameters=True`` (then train DDP with the same flag). DDP never rebuilds
    its buckets then: it launches them along the parameters' definition order, reversed. So the
    profile is laid out in that order, each tensor ready when it and every tensor before it in that
    order are (DDP launches buckets in order), unused parameters at the first gradient of the step
    (where DDP marks them ready), and the plan's buckets are runs of that order, as DDP will keep them.
    """
    from commsched.models.inventory import sum_of_means
    from commsched.models.source import materialize_lazy
    from commsched.profile.measure import measure_profile

    distributed = dist.is_available() and dist.is_initialized()
    try:
        check_module(model, "plan_for")
        check_flags("plan_for", find_unused_parameters=find_unused_parameters)
        if loss_fn is not None:
            check_loss(loss_fn, "plan_for")
        if not isinstance(cluster, (ClusterSpec, str)):
            raise CommschedError(f"cluster must be a preset's name, a cluster file's path or a ClusterSpec, got {type(cluster).__name__} {cluster!r}")
        spec = cluster if isinstance(cluster, ClusterSpec) else cluster_from_spec(cluster)
        chosen = planner(strategy)
        # lazy modules get their parameters on every rank (one forward pass and loss without
        # gradients), as the job's own first step would give them, before rank 0 measures; other
        # ranks' inputs are not read otherwise
        materialize_lazy(model, example_inputs, sum_of_means if loss_fn is None else loss_fn, type(model).__name__)
        refused = None
    except Exception as e:  # noqa: BLE001 - whatever one rank raises, every rank hears of it
        if not distributed:
            raise
        refused = e
    if distributed:  # a rank whose arguments are refused says so on every rank, not only its own
        _agree_on_arguments(refused, model)
    if semantics is None:
        semantics = NCCL
        if distributed and _serving_backend(model) == "gloo":
            from commsched.runtime.validate import runtime_threads

            semantics = Semantics("gloo", runtime_threads())
    plan: Plan | None = None
    error: str | None = None
    if not distributed or dist.get_rank() == 0:
        try:
            profile = measure_profile(model, example_inputs, loss_fn, name=type(model).__name__, iters=iters, warmup=warmup,
                                      batch_size=batch_size)
            profile = with_unused_parameters(profile, model, find_unused_parameters)
            plan = make_plan(planner_for(chosen.name, semantics), profile, spec.allreduce, semantics)
            if chosen.name == "optimal" and not find_unused_parameters:  # no stock layout to keep there (above)
                plan = _recommended(plan, make_plan(DDP(), profile, spec.allreduce, semantics), min_gain)
        except Exception as e:  # noqa: BLE001 - every rank raises it: a rank left waiting for the plan would hang
            if not distributed:
                raise
            error = f"{type(e).__name__}: {e}" if not isinstance(e, CommschedError) else str(e)
    if distributed:
        box = [(plan, error)]
        dist.broadcast_object_list(box, src=0)
        plan, error = box[0]
        if error is not None:
            raise CommschedError(f"rank {dist.get_rank()}: plan_for failed on rank 0: {error}")
    assert plan is not None
    return plan


ARGUMENTS_TIMEOUT_S = 300.0


def _agree_on_arguments(refused: Exception | None, model: nn.Module) -> None:
    """Every rank's verdict on its own ``plan_for`` arguments (a cluster file one rank cannot read,
    a strategy one rank misspells), gathered within ``ARGUMENTS_TIMEOUT_S``: the refusing rank
    raises its own error, the others one naming it (its first 255 bytes), where one rank raising
    alone left the others waiting for its plan."""
    from commsched.runtime.collectives import comm_device, gather_text

    rank = dist.get_rank()
    text = "" if refused is None else str(refused) if isinstance(refused, CommschedError) else f"{type(refused).__name__}: {refused}"
    device = comm_device(None, model if isinstance(model, nn.Module) else nn.Module())  # a rank refused for its model too
    said = gather_text(text or ("refused" if refused is not None else ""), None, device, rank, ARGUMENTS_TIMEOUT_S,
                       "plan_for's argument check")
    if refused is not None:
        raise refused
    bad = [(r, text) for r, text in enumerate(said) if text]
    if bad:
        r, text = bad[0]
        raise CommschedError(f"rank {rank}: plan_for's arguments were refused on rank {r}: {text}")


def _serving_backend(model: nn.Module) -> str | None:
    """The backend that reduces ``model``'s gradients: the default group's backend for the device type
    of its parameters (``get_backend`` says ``"undefined"`` after a plain ``init_process_group()`` and
    ``"cpu:gloo,cuda:nccl"`` for a mixed one, so it cannot tell)."""
    from commsched.runtime.resource_hook import device_backend

    kinds = {p.device.type for p in model.parameters()} or {"cpu"}
    kind = "cuda" if "cuda" in kinds else kinds.pop()
    return device_backend(dist.get_backend_config(), kind)


def _recommended(plan: Plan, stock: Plan, min_gain: float) -> Plan:
    """``plan``, or ``stock`` (stock DDP's default buckets, with the reason) where ``plan`` is not
    predicted at least ``min_gain`` faster (:func:`commsched.planners.compare.recommend`)."""
    from commsched.planners.compare import recommend, same_buckets

    assert plan.predicted is not None and stock.predicted is not None
    same = same_buckets(plan, stock)
    rec = recommend({plan.strategy: plan.predicted.iteration_s}, (plan.strategy,) if same else (), stock.predicted.iteration_s, min_gain)
    if not rec.stock_kept:
        return plan
    return replace(stock, params={**stock.params, "recommended_over": plan.strategy, "reason": rec.reason})
