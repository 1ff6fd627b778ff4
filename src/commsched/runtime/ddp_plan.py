"""A plan against a model, in the terms stock ``DistributedDataParallel`` takes (torch, no process
group): the parameters DDP reduces, whether a plan covers them, the bucket caps that make DDP reduce
its buckets (:func:`ddp_options`), and the profile DDP lays its buckets over with
``find_unused_parameters`` (:func:`with_unused_parameters`). Used by
:class:`~commsched.runtime.data_parallel.DataParallel`, :func:`~commsched.runtime.api.plan_for`,
``validate``'s probes and tuning (:mod:`commsched.runtime.tune`).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import replace

from torch import nn

from commsched.errors import CommschedError, check_flags
from commsched.models.params import check_module, few, ignored_names, trainable_parameters, without_gradient
from commsched.planners.stock_ddp import Expression, TensorInfo, express
from commsched.types import ModelProfile, Plan, TensorSpec


def tensor_infos(module: nn.Module) -> list[TensorInfo]:
    return [
        TensorInfo(n, p.numel() * p.element_size(), str(p.dtype).removeprefix("torch."))
        for n, p in trainable_parameters(module).items()
    ]


def check_plan_fits(plan: Plan, params: dict[str, nn.Parameter]) -> None:
    """The plan covers every trainable parameter exactly once, and each bucket's bytes are its
    parameters' bytes (a plan made for another model, or another dtype, is an error)."""
    names = [n for b in plan.buckets for n in b.tensors]
    unknown = [n for n in names if n not in params]
    if unknown:
        raise CommschedError(
            f"plan {plan.strategy!r} names {len(unknown)} tensor(s) the model has no trainable parameter for, "
            f"first {unknown[0]!r}: was it made for another model?"
        )
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise CommschedError(f"plan {plan.strategy!r} lists tensor {dup!r} more than once")
    missing = [n for n in params if n not in set(names)]
    if missing:
        raise CommschedError(
            f"plan {plan.strategy!r} leaves out {len(missing)} trainable parameter(s), first {missing[0]!r}"
            + (
                ": a parameter unused in the profiled step (plan with find_unused_parameters=True), or a plan made for "
                "another model (one with tied weights, say, where this model's are apart)"
                if len(missing) < len(params) else ""
            )
        )
    for j, b in enumerate(plan.buckets):
        model_bytes = sum(params[n].numel() * params[n].element_size() for n in b.tensors)
        if model_bytes != b.bytes:
            raise CommschedError(
                f"plan {plan.strategy!r} bucket {j} ({b.tensors[0]!r}..) has {b.bytes} bytes, the model's "
                f"parameters in it have {model_bytes}: the plan was made for other shapes or dtypes"
            )


def express_plan(
    plan: Plan, module: nn.Module, *, find_unused_parameters: bool = False, static_graph: bool = False
) -> Expression:
    """The caps for ``plan`` on ``module`` and the buckets stock DDP will reduce with them. DDP
    rebuilds its buckets in ready order unless ``find_unused_parameters`` without ``static_graph``."""
    params = trainable_parameters(module)
    check_plan_fits(plan, params)
    infos = [t for t in tensor_infos(module) if t.name in params]
    keeps_first_buckets = find_unused_parameters and not static_graph
    return express(plan, infos, list(params) if keeps_first_buckets else None)


def warn_inexact(plan: Plan, expr: Expression) -> None:
    warnings.warn(
        f"stock DDP cannot reduce exactly the buckets of plan {plan.strategy!r} ({expr.reason}): "
        f"{len(expr.buckets)} buckets instead of {len(plan.buckets)}, at most {expr.moved_bytes} bytes in another bucket",
        stacklevel=3,
    )


def check_is_plan(plan: object, where: str) -> None:
    """A clear error for what is not a plan (a path is the likely slip: ``commsched.load_plan`` reads one)."""
    if not isinstance(plan, Plan):
        hint = ": read the file with commsched.load_plan(path)" if isinstance(plan, (str, os.PathLike)) else ""
        raise CommschedError(f"{where} takes a commsched Plan, got {type(plan).__name__} {plan!r:.80}{hint}")


def ddp_options(
    plan: Plan, module: nn.Module | None = None, *, find_unused_parameters: bool = False, static_graph: bool = False
) -> dict:
    """Keyword arguments that make stock ``DistributedDataParallel`` reduce ``plan``'s buckets.

    Without ``module`` one dtype is assumed and the caps are the plan's bucket sizes. With it, the
    plan is checked against the model (names, bytes) and, where DDP cannot reduce exactly the plan's
    buckets (a bucket mixing dtypes; with ``find_unused_parameters`` and no ``static_graph``,
    buckets that are not runs of the definition order), a ``UserWarning`` says so and how far off.
    The two flags are passed on to DDP when set.
    """
    check_is_plan(plan, "ddp_options")
    check_flags("ddp_options", find_unused_parameters=find_unused_parameters, static_graph=static_graph)
    if module is not None:
        check_module(module, "ddp_options")
    if module is None:
        if find_unused_parameters and not static_graph:
            raise CommschedError("ddp_options(find_unused_parameters=True) needs the module (DDP then buckets in its definition order)")
        expr = express(plan)
    else:
        expr = express_plan(plan, module, find_unused_parameters=find_unused_parameters, static_graph=static_graph)
        if not expr.exact:
            warn_inexact(plan, expr)
    kwargs = expr.kwargs()
    if find_unused_parameters:
        kwargs["find_unused_parameters"] = True
    if static_graph:
        kwargs["static_graph"] = True
    return kwargs


def compilable(ddp: nn.parallel.DistributedDataParallel) -> nn.parallel.DistributedDataParallel:
    """``ddp``, its ``bucket_bytes_cap`` raised to DDP's first bucket (1 MiB) where a plan's caps are
    all smaller. Dynamo's DDPOptimizer splits a compiled graph into pieces of that size and asserts
    that its 1 MiB first piece is no larger, so without this every compile under such a plan's DDP
    fails, as it does under stock DDP with ``bucket_cap_mb`` below 1. The buckets do not change:
    the reducer has the plan's per-bucket caps (``bucket_cap_mb_list``), which also decide a
    copy's rebuilt reducer; DDP's logging (``_get_ddp_logging_data``) and the attribute itself
    report the raised value."""
    import torch.distributed as dist

    ddp.bucket_bytes_cap = max(ddp.bucket_bytes_cap, dist._DEFAULT_FIRST_BUCKET_BYTES)
    return ddp


def plan_fingerprint(plan: Plan, params: dict[str, nn.Parameter], module: nn.Module | None = None) -> bytes:
    """The plan's layout with every tensor's shape and dtype, and the model's buffers (which the
    set-up broadcasts: ranks whose buffers differ would fail there, less clearly)."""
    layout = [[(n, list(params[n].shape), str(params[n].dtype)) for n in b.tensors] for b in plan.buckets]
    buffers = [(n, list(b.shape), str(b.dtype)) for n, b in module.named_buffers()] if module is not None else []
    return hashlib.sha256(json.dumps([layout, buffers]).encode()).digest()


def unused_parameters(profile: ModelProfile, model: nn.Module) -> list[str]:
    """The trainable parameters (with elements) that got no gradient in the profile's steps."""
    return without_gradient(model, profile.names)


def with_unused_parameters(profile: ModelProfile, model: nn.Module, find_unused: bool) -> ModelProfile:
    """Without ``find_unused``: the profile, or an error naming the trainable parameters it lacks (no
    gradient when measured). With it: the profile in the order DDP keeps its buckets then (reverse
    definition order), ready times the running maximum along it, unused parameters ready at the
    first gradient (see :func:`plan_for`)."""
    params = trainable_parameters(model)
    unused = unused_parameters(profile, model)
    if not find_unused:
        if unused:
            raise CommschedError(
                f"{len(unused)} trainable parameter(s) got no gradient in the measured steps ({few(unused)}); if they are "
                f"really unused, plan with find_unused_parameters=True and train DDP with the same flag"
            )
        return profile
    ready = dict(zip(profile.names, profile.ready_s))
    first = min(ready.values())
    size = {t.name: t.bytes for t in profile.tensors}
    tensors, t = [], profile.forward_s
    for n in reversed([n for n, p in params.items() if p.numel()]):
        r = max(t, ready.get(n, first))
        tensors.append(TensorSpec(n, size.get(n, params[n].numel() * params[n].element_size()), r - t))
        t = r
    return replace(profile, tensors=tuple(tensors))
