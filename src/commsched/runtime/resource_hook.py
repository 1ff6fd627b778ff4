"""Per-bucket resources on stock DDP: a comm hook that sends each bucket to a process group made
for its config (issue 13, item 1).

NCCL sets a communicator's CTAs (blocks) when the communicator is created
(``ProcessGroupNCCL.Options().config.min_ctas`` / ``max_ctas``, NCCL's ``ncclConfig_t``), not per
call. So :func:`resource_groups` makes one group per distinct config of the plan, once, in one
order on every rank (``new_group`` is collective), and :func:`resource_hook` all-reduces each
bucket on its config's group: the plan's blocks per bucket. Threads per block cannot follow: NCCL
has no per-communicator thread count, only ``NCCL_NTHREADS`` for the whole process, so the plan's
``threads_per_block`` is not applied (:func:`plan_threads` says which single value the plan
would need, and :func:`env_overrides` reports the variables that override the plan).

Order and one at a time. The simulator runs the plan's all-reduces one after another in bucket
order (one NCCL stream per communicator). Several communicators run on several streams, which
NCCL would overlap; torch's ``new_group`` documentation asks for a ``work.wait()`` before using
another group. On CUDA the hook does that on a side stream: the side stream waits for the
bucket's gradients (the current stream) and for the previous bucket's all-reduce (its future's
``wait()``, which on CUDA makes the current stream wait on the all-reduce's events without
blocking the CPU), and the all-reduce is launched from it; so all-reduces run in the order DDP
hands over buckets (its bucket index order, the plan's after DDP's rebuild), each after the one
before, while backward compute on the main stream is never held up. On the CPU (gloo) nothing is
waited for: a wait there would block the autograd thread, and the groups then run as gloo's own
threads allow (the routing is what the gloo tests check).

Iteration 0: DDP's buckets follow the definition order until it rebuilds them in the plan's
layout (see :func:`commsched.ddp_options`); a DDP bucket that does not hold exactly one plan
bucket's tensors goes to DDP's own process group (the library default config), as do buckets whose
``resources`` are null.

This module is written against the documented APIs; the NCCL path has not run on a GPU here
(tests skip without CUDA).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.contention import ResourceConfig, config_from_json
from commsched.errors import CommschedError
from commsched.types import Plan

# NCCL variables that apply to every communicator of the process (NCCL's environment variable docs)
OVERRIDING_ENV = {
    "NCCL_NTHREADS": "threads per block of every all-reduce",
    "NCCL_MIN_CTAS": "the least CTAs (blocks) of every communicator",
    "NCCL_MAX_CTAS": "the most CTAs (blocks) of every communicator",
    "NCCL_MIN_NCHANNELS": "the least channels (one block each) of every communicator",
    "NCCL_MAX_NCHANNELS": "the most channels (one block each) of every communicator",
}


def config_key(resources: Mapping | None) -> ResourceConfig | None:
    """A bucket's ``resources`` object as a config; None keeps the default."""
    return None if resources is None else config_from_json(resources, "bucket resources")


def env_overrides(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per NCCL variable set in ``environ`` (default: this process's) that overrides the
    plan's per-bucket resources, since it applies to every communicator."""
    env = os.environ if environ is None else environ
    return [
        f"{name}={env[name]} is set: it fixes {what}, overriding the plan's per-bucket resources"
        for name, what in OVERRIDING_ENV.items()
        if name in env and env[name].strip() != ""
    ]


def plan_threads(plan: Plan) -> int | None:
    """The one threads-per-block value the plan's configs share (what ``NCCL_NTHREADS`` would need
    to be for them), or None when the plan has no configs or they differ."""
    threads = {config_key(b.resources).threads_per_block for b in plan.buckets if b.resources is not None}
    return threads.pop() if len(threads) == 1 else None


def resource_groups(configs, backend: str | None = None, ranks: list[int] | None = None) -> dict:
    """One process group per distinct config in ``configs`` (:class:`ResourceConfig` or None), created in
    one order (by threads, then blocks) so every rank makes the same calls; None maps to no new
    group (the caller's default). On NCCL each group's communicator is limited to ``blocks`` CTAs
    (``min_ctas`` = ``max_ctas``); on any other backend the groups are plain."""
    if not dist.is_available() or not dist.is_initialized():
        raise CommschedError("per-bucket resources need torch.distributed initialised (init_process_group)")
    backend = backend or dist.get_backend()
    groups: dict = {}
    for key in sorted({k for k in configs if k is not None}, key=lambda k: (k.threads_per_block, k.blocks)):
        options = None
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options.config.min_ctas = key.blocks
            options.config.max_ctas = key.blocks
        groups[key] = dist.new_group(ranks=ranks, backend=backend, pg_options=options)
    return groups


@dataclass
class ResourceRouting:
    """The hook's state: each plan bucket's group, and what it did when ``log`` is a list
    (DDP bucket index, plan bucket index or None, (blocks, threads) or None, the group's name)."""

    default_group: object
    groups: dict
    configs: tuple
    bucket_of: dict
    counts: tuple
    serial: bool
    log: list | None = None
    _previous: object = field(default=None, repr=False)
    _side_streams: dict = field(default_factory=dict, repr=False)


def resource_routing(plan: Plan, module: nn.Module, *, process_group=None, log: bool = False) -> ResourceRouting:
    """The state for :func:`resource_hook`: ``plan``'s buckets mapped to ``module``'s parameters and
    a group per distinct config (collective: every rank calls it, in the same place). On NCCL a
    ``UserWarning`` names each variable of :func:`env_overrides` that is set and says when the
    plan's threads per block differ between buckets (only blocks are applied)."""
    params = dict(module.named_parameters())
    missing = [n for b in plan.buckets for n in b.tensors if n not in params]
    if missing:
        raise CommschedError(f"plan {plan.strategy!r} names tensors the model does not have, e.g. {missing[0]!r}")
    configs = tuple(config_key(b.resources) for b in plan.buckets)
    bucket_of = {id(params[n]): i for i, b in enumerate(plan.buckets) for n in b.tensors}
    default = process_group if process_group is not None else dist.group.WORLD
    ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
    groups = resource_groups(configs, ranks=ranks)
    if dist.get_backend() == "nccl":
        for line in env_overrides():
            warnings.warn(line, stacklevel=2)
        if any(k is not None for k in configs) and plan_threads(plan) is None:
            warnings.warn(
                f"plan {plan.strategy!r} gives its buckets different threads per block; NCCL has one value per process "
                "(NCCL_NTHREADS), so only each bucket's blocks are applied",
                stacklevel=2,
            )
    serial = any(p.is_cuda for p in module.parameters())
    counts = tuple(len(b.tensors) for b in plan.buckets)
    return ResourceRouting(default, groups, configs, bucket_of, counts, serial, [] if log else None)


def resource_hook(state, bucket):  # no annotations: DDP compares them with the real classes, and these would be strings
    """All-reduce (average) ``bucket`` (a ``dist.GradBucket``) on the group of its plan bucket's
    config (module docstring); returns DDP's future of the averaged buffer."""
    params = bucket.parameters()
    owners = {state.bucket_of.get(id(p)) for p in params}
    index = owners.pop() if len(owners) == 1 else None
    if index is not None and state.counts[index] != len(params):
        index = None  # a DDP bucket holding part of a plan bucket (iteration 0): not that bucket
    key = state.configs[index] if index is not None else None
    group = state.groups.get(key, state.default_group)
    if state.log is not None:
        state.log.append((bucket.index(), index, None if key is None else (key.blocks, key.threads_per_block), _name(group)))
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size(group))
    if state.serial and buffer.is_cuda:
        fut = _launch_after(state, buffer, group)
    else:
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
    state._previous = fut
    return fut.then(lambda f: f.value()[0])


def _name(group) -> str:
    return str(getattr(group, "group_name", "") or dist.get_process_group_ranks(group))


def _launch_after(state: ResourceRouting, buffer: torch.Tensor, group) -> torch.futures.Future:
    """Launch the all-reduce from a side stream that waits for the gradients and for the previous
    all-reduce (module docstring), so the main stream's compute is not held up."""
    device = buffer.device
    side = state._side_streams.get(device)
    if side is None:
        side = state._side_streams[device] = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        if state._previous is not None:
            state._previous.wait()  # CUDA future: the side stream waits on its events
        buffer.record_stream(side)
        return dist.all_reduce(buffer, group=group, async_op=True).get_future()


__all__ = ["ResourceRouting", "config_key", "env_overrides", "plan_threads", "resource_groups", "resource_hook", "resource_routing"]
