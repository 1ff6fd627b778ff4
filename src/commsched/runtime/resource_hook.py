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

Which backend. The limits are NCCL options, so they are set where the process group's backend for
CUDA tensors is NCCL, read from its backend config (``dist.get_backend_config``, e.g. ``cuda:nccl``
or ``cpu:gloo,cuda:nccl``; :func:`cuda_backend`), not from ``dist.get_backend()``, which names the
string given to ``init_process_group``: ``"undefined"`` for a plain ``init_process_group()``
(torch 2.14 distributed_c10d.py ``init_process_group``: ``backend = "undefined"``; its
``BackendConfig`` then maps the accelerator, ``cuda`` -> ``nccl``) and ``"cpu:gloo,cuda:nccl"``
for a mixed one. Where the CUDA backend is not NCCL the groups are made without limits and a
``UserWarning`` says the plan's blocks are not applied.

Communicators before the first step. ProcessGroupNCCL creates a communicator at the group's first
collective on a device, and NCCL (2.30, ``NCCL_RUNTIME_CONNECT=1`` by default) connects an
algorithm's channels at its first collective (src/init.cc ``runtimeConn``, src/enqueue.cc
``initAlgoChannels``). So :func:`resource_routing` all-reduces, on each config's group, a zero
buffer of each size and dtype of that config's buckets, on the device their parameters are on,
and waits for them: each group's communicator is made and connected for the sizes it will carry
before training starts, not inside the first backward (:attr:`ResourceRouting.warmed` lists them).
Build the routing after the module is on its device, as DDP needs anyway.

Order and one at a time. The simulator runs the plan's all-reduces one after another in bucket
order (one NCCL stream per communicator). Several communicators run on several streams, which
NCCL would overlap; torch's ``new_group`` documentation asks for a ``work.wait()`` before using
another group. On CUDA the hook does that on a side stream: the side stream waits for the
bucket's gradients (the current stream) and for the previous bucket's all-reduce (its future's
``wait()``, which on CUDA makes the current stream wait on the all-reduce's events without
blocking the CPU), and the all-reduce is launched from it; so all-reduces run in the order DDP
hands over buckets (its bucket index order, the plan's after DDP's rebuild), each after the one
before, while backward compute on the main stream is never held up. This is decided per bucket,
when it is reduced, by where its buffer lives (a CUDA tensor), not from the module when the
routing is built. On the CPU (gloo) nothing is waited for: a wait there would block the autograd
thread, and the groups then run as gloo's own threads allow (the routing is what the gloo tests
check).

Iteration 0: DDP's buckets follow the definition order until it rebuilds them in the plan's
layout (see :func:`commsched.ddp_options`); a DDP bucket that does not hold exactly one plan
bucket's tensors goes to DDP's own process group (the library default config), as do buckets whose
``resources`` are null.

This module is written against the documented APIs; the NCCL path has run on one H200 with one
rank (make gpu-check, docs/gpu.md), never with two NCCL ranks (its tests skip without CUDA).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.resource_models import ResourceConfig, config_from_json
from commsched.errors import CommschedError
from commsched.types import Plan

# NCCL variables that apply to every communicator of the process and so override a plan's
# per-bucket resources; what each does is read from NCCL 2.30.7's source (NCCL_PARAM names the
# variable without its NCCL_ prefix).
OVERRIDING_ENV = {
    "NCCL_MIN_NCHANNELS": "raises every communicator's channels (one CTA each) to at least it: NCCL makes "
    "max(NCCL_MIN_NCHANNELS, min_ctas) (src/graph/connect.cc:331, 334-345, 503-505)",
    "NCCL_MAX_NCHANNELS": "caps every communicator's channels (one CTA each): NCCL makes at most "
    "min(NCCL_MAX_NCHANNELS, max_ctas) (src/graph/connect.cc:332, 348-360, 503)",
    "NCCL_MIN_CTAS": "replaces every communicator's min_ctas, the value its group was made with (src/init.cc:1726, 2013-2023)",
    "NCCL_MAX_CTAS": "replaces every communicator's max_ctas, the value its group was made with (src/init.cc:1725, 2025-2035)",
    "NCCL_NTHREADS": "fixes the threads per block of the Simple and LL protocols (ring and tree) of every "
    "communicator (src/graph/tuning.cc:14, 247-254)",
    "NCCL_LL128_NTHREADS": "fixes the threads per block of the LL128 protocol of every communicator (src/graph/tuning.cc:15, 256)",
    "NCCL_ALGO": "limits the algorithms NCCL may pick for every collective (src/graph/tuning.cc:458), and the "
    "algorithm sets the channels and threads a collective gets (NVLS takes its own channel count, src/enqueue.cc:2084-2090)",
    "NCCL_PROTO": "limits the protocols NCCL may pick for every collective (src/graph/tuning.cc:453), and the "
    "protocol sets the threads per block (src/graph/tuning.cc:247-257)",
    "NCCL_TUNER_PLUGIN": "loads a tuner plugin that sets the channels of every collective by its size, over NCCL's "
    "choice (src/plugin/tuner.cc:58, src/enqueue.cc:2147, 2178)",
}


def config_key(resources: Mapping | None) -> ResourceConfig | None:
    """A bucket's ``resources`` object as a config; None keeps the default."""
    return None if resources is None else config_from_json(resources, "bucket resources")


def env_overrides(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per NCCL variable set in ``environ`` (default: this process's) that overrides the
    plan's per-bucket resources, since it applies to every communicator."""
    env = os.environ if environ is None else environ
    return [
        f"{name}={env[name]} is set: it {what}, overriding the plan's per-bucket resources"
        for name, what in OVERRIDING_ENV.items()
        if name in env and env[name].strip() != ""
    ]


def plan_threads(plan: Plan) -> int | None:
    """The one threads-per-block value the plan's configs share (what ``NCCL_NTHREADS`` would need
    to be for them), or None when the plan has no configs or they differ."""
    threads = {config_key(b.resources).threads_per_block for b in plan.buckets if b.resources is not None}
    return threads.pop() if len(threads) == 1 else None


def device_backend(backend_config: str, device_type: str) -> str | None:
    """The backend a torch backend config string (``dist.get_backend_config``: ``"cuda:nccl"``,
    ``"cpu:gloo,cuda:nccl"``, ``"cpu:gloo"``) names for ``device_type``; None when it names none.
    torch writes it as ``device:backend`` pairs joined by commas (distributed_c10d.py
    ``BackendConfig.__repr__``)."""
    for pair in str(backend_config).lower().split(","):
        device, sep, name = pair.partition(":")
        if sep and device.strip() == device_type and name.strip():
            return name.strip()
    return None


def cuda_backend(backend_config: str) -> str | None:
    """The backend that serves CUDA tensors in a group of this backend config (:func:`device_backend`)."""
    return device_backend(backend_config, "cuda")


def routing_warnings(configs, backend: str | None, backend_config: str, environ: Mapping[str, str], threads: int | None) -> list[str]:
    """What :func:`resource_routing` warns about, as lines: the plan's blocks dropped because the
    group's CUDA backend (``backend``, from ``backend_config``) is not NCCL; on NCCL the variables of
    :func:`env_overrides` set in ``environ`` and, when the plan's configs differ in threads per block
    (``threads`` None), that only blocks are applied."""
    configured = any(k is not None for k in configs)
    if backend != "nccl":
        if not configured:
            return []
        served = f"with {backend}" if backend else "by no backend"
        return [
            f"the process group's CUDA tensors are served {served} (backend config {backend_config!r}), not NCCL: "
            "the plan's per-bucket blocks are not applied (they are NCCL communicator options); buckets still go "
            "to one group per config"
        ]
    lines = env_overrides(environ)
    if configured and threads is None:
        lines.append(
            "the plan gives its buckets different threads per block; NCCL has one value per process "
            "(NCCL_NTHREADS), so only each bucket's blocks are applied"
        )
    return lines


def nccl_options(key: ResourceConfig):
    """``ProcessGroupNCCL.Options`` whose communicator gets exactly ``key.blocks`` CTAs."""
    options = dist.ProcessGroupNCCL.Options()
    options.config.min_ctas = key.blocks
    options.config.max_ctas = key.blocks
    return options


def resource_groups(configs, backend: str | None = None, ranks: list[int] | None = None, *, process_group=None) -> dict:
    """One process group per distinct config in ``configs`` (:class:`ResourceConfig` or None), created in
    one order (by threads, then blocks) so every rank makes the same calls; None maps to no new
    group (the caller's default). The groups get ``backend`` (default: ``process_group``'s, else the
    default group's). Where that backend serves CUDA tensors with NCCL (:func:`cuda_backend` of its
    backend config), each group's communicator is limited to ``blocks`` CTAs (``min_ctas`` =
    ``max_ctas``); otherwise the groups are plain."""
    if not dist.is_available() or not dist.is_initialized():
        raise CommschedError("per-bucket resources need torch.distributed initialised (init_process_group)")
    base = process_group if process_group is not None else dist.group.WORLD
    if backend is None:
        backend = dist.get_backend(base)  # what the groups mirror, e.g. "undefined" or "cpu:gloo,cuda:nccl"
        layout = dist.get_backend_config(base)
    else:
        layout = str(dist.BackendConfig(backend))  # what new_group will make of it
    nccl = cuda_backend(layout) == "nccl"
    groups: dict = {}
    for key in sorted({k for k in configs if k is not None}, key=lambda k: (k.threads_per_block, k.blocks)):
        groups[key] = dist.new_group(ranks=ranks, backend=backend, pg_options=nccl_options(key) if nccl else None)
    return groups


@dataclass(frozen=True)
class WarmUp:
    """One warm-up all-reduce: a zero buffer of ``numel`` elements of ``dtype`` on ``device``, on the
    group of ``config`` (the size and dtype of one of that config's buckets)."""

    config: ResourceConfig
    device: str
    dtype: str
    numel: int


def warm_ups(plan: Plan, params: Mapping[str, torch.Tensor], configs) -> tuple[WarmUp, ...]:
    """The warm-up all-reduces for ``plan``'s buckets with a config (``configs[i]`` of bucket i): one per
    distinct (config, device, dtype, element count), in one order on every rank (the groups' order, then
    device, dtype, size), from the parameters each bucket holds."""
    seen = set()
    for bucket, key in zip(plan.buckets, configs):
        if key is None or not bucket.tensors:
            continue
        first = params[bucket.tensors[0]]
        numel = sum(params[n].numel() for n in bucket.tensors)
        if numel:
            seen.add(WarmUp(key, str(first.device), str(first.dtype), numel))
    return tuple(sorted(seen, key=lambda w: (w.config.threads_per_block, w.config.blocks, w.device, w.dtype, w.numel)))


def warm_up_groups(groups: Mapping, items) -> None:
    """All-reduces a zero buffer for each :class:`WarmUp` on its config's group (zeros: a sum of them
    stays zero), then waits for them, so every communicator exists and is connected before it is
    first used by a bucket (module docstring). Collective: every rank calls it with the same items."""
    largest: dict = {}
    for w in items:
        largest[(w.device, w.dtype)] = max(largest.get((w.device, w.dtype), 0), w.numel)
    buffers = {k: torch.zeros(n, dtype=getattr(torch, k[1].removeprefix("torch.")), device=k[0]) for k, n in largest.items()}
    for w in items:
        dist.all_reduce(buffers[(w.device, w.dtype)][: w.numel], group=groups[w.config])
    for device, _ in buffers:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)


@dataclass
class ResourceRouting:
    """The hook's state: each plan bucket's group, the backend that serves CUDA tensors in them
    (:func:`cuda_backend`), the warm-up all-reduces done, and what it did when ``log`` is a list
    (DDP bucket index, plan bucket index or None, (blocks, threads) or None, the group's name)."""

    default_group: object
    groups: dict
    configs: tuple
    bucket_of: dict
    counts: tuple
    cuda_backend: str | None = None
    warmed: tuple = ()
    log: list | None = None
    _previous: object = field(default=None, repr=False)  # the last CUDA bucket's future (the side stream waits on it)
    _side_streams: dict = field(default_factory=dict, repr=False)
    _warned_off_cuda: bool = field(default=False, repr=False)


def resource_routing(plan: Plan, module: nn.Module, *, process_group=None, log: bool = False) -> ResourceRouting:
    """The state for :func:`resource_hook`: ``plan``'s buckets mapped to ``module``'s parameters, a
    group per distinct config, and each group's communicator made and warmed up on the device the
    parameters are on (collective: every rank calls it, in the same place, after the module is on
    its device). A ``UserWarning`` per line of :func:`routing_warnings`: the blocks dropped where
    the group's CUDA backend is not NCCL; on NCCL the variables of :func:`env_overrides` that are
    set, and threads per block that differ between buckets."""
    params = dict(module.named_parameters())
    missing = [n for b in plan.buckets for n in b.tensors if n not in params]
    if missing:
        raise CommschedError(f"plan {plan.strategy!r} names tensors the model does not have, e.g. {missing[0]!r}")
    configs = tuple(config_key(b.resources) for b in plan.buckets)
    bucket_of = {id(params[n]): i for i, b in enumerate(plan.buckets) for n in b.tensors}
    default = process_group if process_group is not None else dist.group.WORLD
    ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
    groups = resource_groups(configs, ranks=ranks, process_group=default)
    layout = dist.get_backend_config(default)
    backend = cuda_backend(layout)
    for line in routing_warnings(configs, backend, layout, os.environ, plan_threads(plan)):
        warnings.warn(f"plan {plan.strategy!r}: {line}", stacklevel=2)
    warmed = warm_ups(plan, params, configs)
    warm_up_groups(groups, warmed)
    counts = tuple(len(b.tensors) for b in plan.buckets)
    return ResourceRouting(default, groups, configs, bucket_of, counts, backend, warmed, [] if log else None)


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
    if key is not None and not buffer.is_cuda and state.cuda_backend == "nccl" and not state._warned_off_cuda:
        state._warned_off_cuda = True
        warnings.warn(
            f"a bucket with resources {key.short} is on {buffer.device}, not CUDA: NCCL's CTA limits do not apply to it",
            stacklevel=2,
        )
    if buffer.is_cuda:  # where this bucket lives now, not where the module was when the routing was built
        fut = state._previous = _launch_after(state, buffer, group)
    else:
        fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()
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


__all__ = [
    "OVERRIDING_ENV",
    "ResourceRouting",
    "WarmUp",
    "config_key",
    "cuda_backend",
    "device_backend",
    "env_overrides",
    "nccl_options",
    "plan_threads",
    "resource_groups",
    "resource_hook",
    "resource_routing",
    "routing_warnings",
    "warm_up_groups",
    "warm_ups",
]
