"""Apply a plan through stock ``DistributedDataParallel``: its own reducer, with the plan's bucket caps.

Two ways, the same buckets:

- ``DistributedDataParallel(model, **commsched.ddp_options(plan, model))``: stock DDP, nothing else;
- ``commsched.DataParallel(model, plan)``: a subclass of it that adds what stock DDP's constructor
  does not do: every rank checks that it holds the same plan for the same model, and a rank that
  dies or hangs while the model is wrapped is a clear error on the others within ``timeout_s``
  (stock DDP waits the process group's timeout, 30 minutes by default, or raises gloo's raw error);
  with ``record=True`` every step's timeline is recorded (:mod:`commsched.runtime.record`).
  After construction it *is* stock DDP: same reducer, same comm path, no comm hook (recording or not).

What DDP does with the caps, from the first step on, is in :mod:`commsched.planners.stock_ddp`: iteration 0
buckets the parameters in definition order with the same caps; from iteration 1 (after DDP's bucket
rebuild) the buckets are the plan's. With ``find_unused_parameters=True`` DDP never rebuilds, so the
caps are laid over the definition order instead, which reproduces the plan where its buckets are
contiguous runs of it (:func:`express_plan` says when not, and by how much).
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from commsched.planners.stock_ddp import Expression, TensorInfo, express
from commsched.errors import CommschedError
from commsched.types import Plan

# DDP arguments the plan decides (or that the wrapper handles itself)
_RESERVED = ("bucket_cap_mb", "bucket_cap_mb_list", "init_sync")


def ignored_names(module: nn.Module) -> set[str]:
    """Parameters and buffers DDP is told to leave alone (``_set_params_and_buffers_to_ignore_for_model``)."""
    return set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()) or ())


def trainable_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters DDP reduces, by name: trainable, not ignored, shared ones once
    (named_parameters already dedupes)."""
    ignored = ignored_names(module)
    return {n: p for n, p in module.named_parameters() if p.requires_grad and n not in ignored}


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
            + (" (a parameter unused in the profiled step: plan with find_unused_parameters=True)" if len(missing) < len(params) else "")
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


def _warn_inexact(plan: Plan, expr: Expression) -> None:
    warnings.warn(
        f"stock DDP cannot reduce exactly plan {plan.strategy!r}'s buckets ({expr.reason}): "
        f"{len(expr.buckets)} buckets instead of {len(plan.buckets)}, at most {expr.moved_bytes} bytes in another bucket",
        stacklevel=3,
    )


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
    if module is None:
        if find_unused_parameters and not static_graph:
            raise CommschedError("ddp_options(find_unused_parameters=True) needs the module (DDP then buckets in its definition order)")
        expr = express(plan)
    else:
        expr = express_plan(plan, module, find_unused_parameters=find_unused_parameters, static_graph=static_graph)
        if not expr.exact:
            _warn_inexact(plan, expr)
    kwargs = expr.kwargs()
    if find_unused_parameters:
        kwargs["find_unused_parameters"] = True
    if static_graph:
        kwargs["static_graph"] = True
    return kwargs


def plan_fingerprint(plan: Plan, params: dict[str, nn.Parameter], module: nn.Module | None = None) -> bytes:
    """The plan's layout with every tensor's shape and dtype, and the model's buffers (which the
    set-up broadcasts: ranks whose buffers differ would fail there, less clearly)."""
    layout = [[(n, list(params[n].shape), str(params[n].dtype)) for n in b.tensors] for b in plan.buckets]
    buffers = [(n, list(b.shape), str(b.dtype)) for n, b in module.named_buffers()] if module is not None else []
    return hashlib.sha256(json.dumps([layout, buffers]).encode()).digest()


class DataParallel(nn.parallel.DistributedDataParallel):
    """Stock ``DistributedDataParallel`` with a plan's buckets, checked on every rank (module docstring).

    ``timeout_s`` bounds the whole set-up (one deadline): the plan check and the broadcast of rank
    0's parameters and buffers. During training DDP's collectives wait as long as the process group's timeout
    (``init_process_group(timeout=...)`` or ``dist.set_timeout``); a rank that dies mid-training
    is reported by gloo as soon as its connections close. Other keyword arguments go to DDP, except
    the bucket caps and ``init_sync``, which the plan and the wrapper decide.
    """

    def __init__(
        self,
        module: nn.Module,
        plan: Plan,
        *,
        process_group: dist.ProcessGroup | None = None,
        timeout_s: float = 300.0,
        find_unused_parameters: bool = False,
        record: bool = False,
        **ddp_kwargs,
    ) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise CommschedError("commsched.DataParallel needs torch.distributed initialised (init_process_group)")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < 1e6:
            raise CommschedError(f"timeout_s must be a number of seconds in (0, 1e6), got {timeout_s!r}")
        bad = [k for k in _RESERVED if k in ddp_kwargs]
        if bad:
            raise CommschedError(f"commsched.DataParallel sets {bad[0]!r} itself (from the plan); leave it out")
        group = process_group if process_group is not None else dist.group.WORLD
        rank = dist.get_rank(group)
        deadline = time.monotonic() + float(timeout_s)  # one deadline for the whole set-up
        _agree_on_plan(plan, module, group, deadline, rank)
        expr = express_plan(
            plan, module, find_unused_parameters=find_unused_parameters, static_graph=bool(ddp_kwargs.get("static_graph"))
        )
        if not expr.exact:
            _warn_inexact(plan, expr)
        # DDP's init sync leaves buffers alone with the deprecated broadcast_buffers=False
        sync_buffers = ddp_kwargs.get("forward_sync_buffers") is not None or ddp_kwargs.get("broadcast_buffers", True) is not False
        _broadcast_state(module, group, deadline, rank, sync_buffers)
        try:
            super().__init__(
                module,
                process_group=process_group,
                find_unused_parameters=find_unused_parameters,
                init_sync=False,  # done above, under the deadline
                **expr.kwargs(),
                **ddp_kwargs,
            )
        except RuntimeError as e:  # DDP's own checks (e.g. a module without parameters)
            raise CommschedError(f"rank {rank}: DistributedDataParallel refused the model: {str(e).splitlines()[0]}") from e
        self.plan = plan
        self.expression = expr
        self.timeout_s = float(timeout_s)
        self.recorder = None
        if record:
            from commsched.runtime.record import StepRecorder

            self.recorder = StepRecorder(self, order=plan.tensor_order)

    @property
    def records(self) -> list:
        """Recorded steps (``record=True``), as :class:`~commsched.runtime.record.StepRecord`."""
        if self.recorder is None:
            raise CommschedError("this DataParallel records nothing: pass record=True")
        return self.recorder.records


def _wait(work, deadline: float, what: str, rank: int, cause: str) -> None:
    left = deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError("no time left before the set-up's deadline")
        work.wait(timedelta(seconds=left))
    except Exception as e:  # noqa: BLE001 - a timeout and a closed connection mean the same here
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CommschedError(f"rank {rank}: {what} did not complete before the set-up's deadline; {cause} ({type(e).__name__}: {first})") from e


_MESSAGE_BYTES = 1024  # room for a rank's error in the plan check's one collective


def _agree_on_plan(plan: Plan, module: nn.Module, group, deadline: float, rank: int) -> None:
    """Every rank learns every rank's verdict (fits its model? which plan? its error, truncated)
    in one fixed-size all-gather before anyone raises, so no rank hangs; a rank that never arrives
    is an error at the deadline."""
    params = trainable_parameters(module)
    error = b""
    try:
        check_plan_fits(plan, params)
        digest = plan_fingerprint(plan, params, module)
    except CommschedError as e:
        error, digest = str(e).encode()[:_MESSAGE_BYTES], bytes(32)
    world = dist.get_world_size(group)
    mine = torch.zeros(1 + 32 + 2 + _MESSAGE_BYTES, dtype=torch.uint8)
    mine[0] = 1 if error else 0
    mine[1:33] = torch.tensor(list(digest), dtype=torch.uint8)
    mine[33:35] = torch.tensor([len(error) >> 8, len(error) & 255], dtype=torch.uint8)
    mine[35 : 35 + len(error)] = torch.tensor(list(error), dtype=torch.uint8)
    device = _comm_device(group, module)
    everyone = [torch.empty_like(mine, device=device) for _ in range(world)]
    work = dist.all_gather(everyone, mine.to(device), group=group, async_op=True)
    _wait(work, deadline, "the plan check", rank, "a peer rank has probably died or is stuck before wrapping its model")
    got = [bytes(t.cpu().tolist()) for t in everyone]
    failed = [r for r, g in enumerate(got) if g[0]]
    if failed:
        r = failed[0]
        n = (got[r][33] << 8) | got[r][34]
        message = got[r][35 : 35 + n].decode(errors="replace")
        raise CommschedError(f"rank {rank}: the plan does not fit the model on rank {r}: {message}")
    digests = [g[1:33] for g in got]
    if len(set(digests)) > 1:
        groups: dict[bytes, list[int]] = {}
        for r, d in enumerate(digests):
            groups.setdefault(d, []).append(r)
        detail = "; ".join(f"ranks {rs} have plan {d[:8].hex()}" for d, rs in groups.items())
        raise CommschedError(f"rank {rank}: ranks hold different plans or models ({detail})")


def _broadcast_state(module: nn.Module, group, deadline: float, rank: int, sync_buffers: bool = True) -> None:
    """Rank 0's parameters and buffers everywhere (what DDP's init sync does, leaving out what DDP is
    told to ignore), one flat tensor per dtype and device, under the set-up's deadline."""
    ignored = ignored_names(module)
    tensors = [p.detach() for n, p in module.named_parameters() if n not in ignored]
    if sync_buffers:
        tensors += [b for n, b in module.named_buffers() if n not in ignored]
    by_kind: dict[tuple, list[torch.Tensor]] = {}
    for t in tensors:
        if t.numel():
            by_kind.setdefault((t.dtype, t.device), []).append(t)
    src = dist.get_global_rank(group, 0) if group is not dist.group.WORLD else 0
    flats = []
    for ts in by_kind.values():
        flat = torch.cat([t.reshape(-1) for t in ts])
        flats.append((ts, flat, dist.broadcast(flat, src=src, group=group, async_op=True)))
    for ts, flat, work in flats:
        _wait(work, deadline, "the broadcast of rank 0's parameters and buffers", rank, "a peer rank has probably died")
        with torch.no_grad():
            offset = 0
            for t in ts:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()


def _comm_device(group, module: nn.Module) -> torch.device:
    """The CPU where the group serves CPU tensors, else its CUDA device: read from the group's
    backend config (``cuda:nccl`` for ``nccl`` and for a plain ``init_process_group()`` on a GPU,
    whose ``get_backend`` is ``"undefined"``), not from ``get_backend``."""
    from commsched.runtime.resource_hook import device_backend

    if device_backend(dist.get_backend_config(group), "cpu") is None:
        p = next(iter(module.parameters()), None)
        return p.device if p is not None and p.is_cuda else torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
