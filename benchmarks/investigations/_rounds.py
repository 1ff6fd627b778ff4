"""Interleaved rounds for the benchmark scripts run under torchrun (every rank in lockstep)."""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist


def interleaved(timed: Callable[[str], tuple], kinds: list[str], rounds: int) -> list[dict[str, list[tuple]]]:
    """One warm-up call of ``timed`` per kind, then ``rounds`` rounds of every kind, the order
    rotated each round so that no kind always runs first or last; every rank's results
    (``[rank][kind][round]``)."""
    for k in kinds:
        timed(k)
    got: dict[str, list[tuple]] = {k: [] for k in kinds}
    for r in range(rounds):
        for k in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
            got[k].append(timed(k))
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, got)
    return everyone


def setup(argv: list[str]):
    """``MODEL BATCH IMAGE ROUNDS`` (IMAGE 0: the model's default) -> (name, batch, image, rounds,
    model, inputs), with the gloo process group initialised and the seed fixed."""
    import torch

    from commsched.models.zoo import build_model, example_input

    name, batch, image, rounds = argv[1], int(argv[2]), int(argv[3]) or None, int(argv[4])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = build_model(name)
    return name, batch, image, rounds, model, example_input(name, batch, image)


def stock_ddp(model, planner, order):
    """(stock DDP over a copy of ``model`` with ``planner``'s buckets for the profile ``order``
    (through ``ddp_options``), its SGD optimizer): what the scripts time as a training step."""
    import copy

    import torch
    from torch.nn.parallel import DistributedDataParallel

    from commsched.cost.models import Table
    from commsched.planners import make_plan
    from commsched.runtime.data_parallel import ddp_options

    m = copy.deepcopy(model)
    ddp = DistributedDataParallel(m, **ddp_options(make_plan(planner, order, Table((1, 2), (1.0, 1.0))), m))
    return ddp, torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
