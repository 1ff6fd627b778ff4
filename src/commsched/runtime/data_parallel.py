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

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import JoinHook

from commsched.errors import CommschedError, check_flags
from commsched.models.params import check_module
from commsched.runtime.collectives import comm_device as _comm_device
from commsched.runtime.collectives import wait_until as _wait
from commsched.runtime.ddp_plan import (  # noqa: F401 - the names users and tests import from here
    check_is_plan,
    check_plan_fits,
    compilable,
    ddp_options,
    express_plan,
    ignored_names,
    plan_fingerprint,
    tensor_infos,
    trainable_parameters,
    warn_inexact,
)
from commsched.runtime.tune import TuneConfig, Tuner
from commsched.types import Plan

# DDP arguments the plan decides (or that the wrapper handles itself)
_RESERVED = ("bucket_cap_mb", "bucket_cap_mb_list", "init_sync")
# DDP's keyword arguments that are flags (torch.nn.parallel.DistributedDataParallel.__init__; the two
# buffer flags may also be None, their default)
DDP_FLAGS = ("check_reduction", "gradient_as_bucket_view", "static_graph", "skip_all_reduce_unused_params", "batched_grad_copy",
             "broadcast_buffers", "forward_sync_buffers")


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
        plan: Plan | None = None,
        *,
        tune: bool | TuneConfig = False,
        process_group: dist.ProcessGroup | None = None,
        timeout_s: float = 300.0,
        find_unused_parameters: bool = False,
        record: bool = False,
        **ddp_kwargs,
    ) -> None:
        check_module(module, "commsched.DataParallel")
        check_flags("commsched.DataParallel", find_unused_parameters=find_unused_parameters, record=record,
                    **{k: ddp_kwargs[k] for k in DDP_FLAGS if ddp_kwargs.get(k) is not None})
        if not dist.is_available() or not dist.is_initialized():
            raise CommschedError("commsched.DataParallel needs torch.distributed initialised (init_process_group)")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < 1e6:
            raise CommschedError(f"timeout_s must be a number of seconds in (0, 1e6), got {timeout_s!r}")
        bad = [k for k in _RESERVED if k in ddp_kwargs]
        if bad:
            source = "stock DDP's defaults, then the plan tuning keeps" if tune is not False else "the plan"
            raise CommschedError(f"commsched.DataParallel sets {bad[0]!r} itself (from {source}); leave it out")
        if tune is not False and plan is not None:
            raise CommschedError("commsched.DataParallel takes a plan or tune=True, not both (tuning makes its own plan)")
        if tune is False and plan is None:
            raise CommschedError("commsched.DataParallel needs a plan (commsched.load_plan, plan_for) or tune=True")
        if plan is not None:
            check_is_plan(plan, "commsched.DataParallel")
        if tune is not False and record:
            raise CommschedError("commsched.DataParallel(tune=True) records its own steps while tuning: leave record out")
        if tune is not False and not isinstance(tune, (bool, TuneConfig)):
            raise CommschedError(f"tune must be True or a commsched.TuneConfig, got {tune!r}")
        group = process_group if process_group is not None else dist.group.WORLD
        rank = dist.get_rank(group)
        deadline = time.monotonic() + float(timeout_s)  # one deadline for the whole set-up
        static_graph = bool(ddp_kwargs.get("static_graph"))
        if not trainable_parameters(module):
            raise CommschedError(f"rank {rank}: the model has no parameter that requires a gradient: DDP has nothing to reduce")
        if plan is None:  # tuning: stock DDP's defaults first; every rank checks it has the same model
            _agree_on_plan(_whole_model_plan(module), module, group, deadline, rank)
            expr = None
        else:
            _agree_on_plan(plan, module, group, deadline, rank)
            expr = express_plan(plan, module, find_unused_parameters=find_unused_parameters, static_graph=static_graph)
            if not expr.exact:
                warn_inexact(plan, expr)
        # DDP's init sync leaves buffers alone with the deprecated broadcast_buffers=False
        sync_buffers = ddp_kwargs.get("forward_sync_buffers") is not None or ddp_kwargs.get("broadcast_buffers", True) is not False
        _broadcast_state(module, group, deadline, rank, sync_buffers)
        try:
            super().__init__(
                module,
                process_group=process_group,
                find_unused_parameters=find_unused_parameters,
                init_sync=False,  # done above, under the deadline
                **(expr.kwargs() if expr is not None else {}),
                **ddp_kwargs,
            )
        except RuntimeError as e:  # DDP's own checks (e.g. a module without parameters)
            raise CommschedError(f"rank {rank}: DistributedDataParallel refused the model: {str(e).splitlines()[0]}") from e
        compilable(self)
        self.plan = plan
        self.expression = expr
        self.timeout_s = float(timeout_s)
        self.recorder = None
        self.tuner: Tuner | None = None
        if record:
            from commsched.runtime.record import StepRecorder

            assert plan is not None
            self.recorder = StepRecorder(self, order=plan.tensor_order)
        if tune is not False:
            cfg = tune if isinstance(tune, TuneConfig) else TuneConfig(timeout_s=float(timeout_s))
            self.tuner = Tuner(self, cfg, ddp_kwargs, find_unused_parameters, group, rank)

    # torch.compile skips this frame and compiles what it calls, as it does with stock DDP's
    # forward: the module underneath compiles, the tuner's bookkeeping here is not graph code.
    # (torch._disable_dynamo is torch.compiler.disable without importing Dynamo before a call)
    @torch._disable_dynamo(recursive=False)
    def forward(self, *inputs, **kwargs):
        """Stock DDP's forward; while tuning (and after it keeps a plan), the forward of the DDP
        the tuner chose for this step, over the same module (:mod:`commsched.runtime.tune`)."""
        if self.tuner is None:
            return super().forward(*inputs, **kwargs)
        grad = torch.is_grad_enabled()
        target = self.tuner.route(grad and self.require_backward_grad_sync, joining=self._join_config.enable,
                                  accumulating=grad and not self.require_backward_grad_sync)
        if target is None:
            return super().forward(*inputs, **kwargs)
        target.require_backward_grad_sync = self.require_backward_grad_sync  # no_sync() on this wrapper
        # a Join context over this wrapper (model.join(), Join([model, ...])): that DDP takes part in it
        target._join_config = self._join_config
        target._divide_by_initial_world_size = getattr(self, "_divide_by_initial_world_size", True)
        return target(*inputs, **kwargs)

    def register_comm_hook(self, state, hook):
        """Stock DDP's, on the DDP forwards go to. While tuning, or after it kept a plan, the hook
        ends that first (:meth:`~commsched.runtime.tune.Tuner.end_for_comm_hook`): stock DDP's default
        buckets, as stock DDP with this hook has them."""
        if self.__dict__.get("tuner") is not None:
            self._check_comm_hook(hook)  # a hook DDP would refuse leaves tuning as it is
        target = self._ddp_for_hook()
        return super().register_comm_hook(state, hook) if target is None else target.register_comm_hook(state, hook)

    def _set_static_graph(self):
        """Stock DDP's (its constructor calls it for ``static_graph=True``). Called on the wrapper
        after it was built, while tuning or after it kept a plan, it ends that first, as a comm
        hook does (:meth:`~commsched.runtime.tune.Tuner.end_for_static_graph`)."""
        was = self.static_graph  # set already (static_graph=True): stock DDP only warns
        super()._set_static_graph()
        tuner = self.__dict__.get("tuner")
        if tuner is not None and not was:
            tuner.end_for_static_graph()

    def _register_builtin_comm_hook(self, comm_hook_type):
        """As :meth:`register_comm_hook`, for torch's built-in hooks."""
        target = self._ddp_for_hook()
        return super()._register_builtin_comm_hook(comm_hook_type) if target is None else target._register_builtin_comm_hook(comm_hook_type)

    def _ddp_for_hook(self) -> nn.Module | None:
        """The DDP a comm hook goes on, after tuning ended for it (None: this wrapper). No tuner
        yet inside DDP's own ``__init__``, which registers one for ``mixed_precision``."""
        tuner = self.__dict__.get("tuner")
        if tuner is None:
            return None
        tuner.end_for_comm_hook()
        return tuner.active  # with find_unused_parameters a DDP the tuner built

    def join_hook(self, **kwargs):
        """Stock DDP's join hook (uneven inputs), shadowing the DDP forwards go to once tuning ends.

        ``Join`` asks every joinable for its hook as it is built, whether enabled or not, so tuning
        does not end here: it ends at the first forward after an enabled ``Join`` over this wrapper
        was built (``Join`` enables it then and never disables it), or, on a rank out of inputs
        before that forward, at its first shadowing of one or the context's end
        (:class:`_TunedJoinHook`)."""
        hook = super().join_hook(**kwargs)  # sets divide_by_initial_world_size on this wrapper
        return hook if self.tuner is None else _TunedJoinHook(self, kwargs)

    def __getstate__(self):
        """What ``copy.deepcopy`` and pickling keep (stock DDP rebuilds its reducer from it on the
        default process group, the only one it copies): this wrapper without its tuner or
        recorder, with the buckets in use now. After tuning kept a plan those are the plan's (the
        copy is ``DataParallel(model, plan)``); while tuning runs, stock DDP's defaults. A process
        group, a tuner's DDPs and its hooks cannot be copied."""
        from commsched.runtime.record import StepRecorder

        attrs = super().__getstate__()
        attrs["tuner"], attrs["recorder"] = None, None
        attrs.pop("_commsched_recorder", None)  # the recorder attached (ours or the tuner's)
        # with static_graph the copy's new reducer delays its first iteration's all-reduces as the
        # original's did; stock DDP copies the flag that says they were queued, and they never are
        attrs["_static_graph_delay_allreduce_enqueued"] = False
        # its forward hooks on this wrapper are its bound methods: they stay behind too
        ours = {k for name in ("_forward_pre_hooks", "_forward_hooks") for k, hook in attrs[name].items()
                if isinstance(getattr(hook, "__self__", None), StepRecorder)}
        if ours:
            for name, hooks in list(attrs.items()):
                if name.startswith("_forward") and isinstance(hooks, dict):
                    attrs[name] = type(hooks)((k, v) for k, v in hooks.items() if k not in ours)
        tuner = self.tuner
        if tuner is not None and tuner.decision == "plan" and tuner.active is not None:
            src = tuner.active
            for k in ("_bucket_config", "bucket_bytes_cap", "bucket_bytes_cap_list", "bucket_bytes_cap_default"):
                attrs[k] = getattr(src, k)
            attrs["plan"], attrs["expression"] = tuner.plan, None
        return attrs

    @property
    def tuning(self) -> dict | None:
        """What tuning decided and what it cost (None without ``tune``; ``decision`` None while it runs)."""
        if self.tuner is None:
            return None
        try:
            return self.tuner.report()
        except AttributeError as e:  # nn.Module.__getattr__ would answer "no attribute 'tuning'" instead
            raise RuntimeError(f"commsched.DataParallel.tuning: {type(e).__name__}: {e}") from e

    @property
    def records(self) -> list:
        """Recorded steps (``record=True``), as :class:`~commsched.runtime.record.StepRecord`."""
        if self.recorder is None:
            raise CommschedError("this DataParallel records nothing: pass record=True")
        return self.recorder.records


class _TunedJoinHook(JoinHook):
    """The join hook of a tuning wrapper: on a rank out of inputs it ends tuning (the other ranks
    end it in the same step's forward) and shadows the collectives of the DDP forwards go to then,
    with stock DDP's own hook."""

    def __init__(self, wrapper: DataParallel, kwargs: dict) -> None:
        self.wrapper, self.kwargs = wrapper, kwargs

    def _ddp_hook(self):
        tuner = self.wrapper.tuner
        tuner.end_for_join()
        target = tuner.active if tuner.active is not None else self.wrapper
        return nn.parallel.DistributedDataParallel.join_hook(target, **self.kwargs)  # stock DDP's, not the override

    def main_hook(self) -> None:
        self._ddp_hook().main_hook()

    def post_hook(self, is_last_joiner: bool) -> None:
        self._ddp_hook().post_hook(is_last_joiner)


def _whole_model_plan(module: nn.Module) -> Plan:
    """Every trainable parameter in one bucket: what the ranks compare when no plan is given."""
    from commsched.types import Bucket

    params = trainable_parameters(module)
    size = sum(p.numel() * p.element_size() for p in params.values())
    return Plan("stock", type(module).__name__, (Bucket(tuple(params), size),))


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


