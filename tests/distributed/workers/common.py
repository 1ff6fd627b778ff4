"""Shared by the distributed test workers: a small model with the shapes that matter, its plans."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # the repo, for `tests`


class Net(nn.Module):
    """Conv + BatchNorm + MLP, with an optional frozen layer and an optional sometimes-unused branch."""

    def __init__(self, frozen: bool = False, branch: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 8 * 8, 64)
        self.fc2 = nn.Linear(64, 10)
        self.extra = nn.Linear(64, 10) if branch else None
        self.force_extra = False  # profiling sees every parameter, as a plan must cover them all
        if frozen:
            for p in self.conv.parameters():
                p.requires_grad_(False)

    def forward(self, x, use_extra: bool = False):
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.relu(self.fc1(h.flatten(1)))
        out = self.fc2(h)
        if self.extra is not None and (use_extra or self.force_extra):
            out = out + self.extra(h)
        return out


def init() -> tuple[int, int]:
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "60"))))
    return dist.get_rank(), dist.get_world_size()


def plans_for(model: nn.Module, strategies: list[str]):
    """Plans of the model from its real ready order (inventory) on a cluster where bucketing matters."""
    from commsched.cost.models import AlphaBeta
    from commsched.models.inventory import inventory
    from commsched.planners import STRATEGIES, DDP, make_plan
    from commsched.profile.estimate import estimate_profile

    x = torch.randn(2, 3, 8, 8).to(next(model.parameters()).dtype)
    model.force_extra = True
    inv = inventory(model, (x,), name="net")
    model.force_extra = False
    prof = estimate_profile(inv, "V100", 32)
    cost = AlphaBeta(5e-6, 1e-10)
    out = {}
    for s in strategies:
        planner = STRATEGIES[s] if s != "ddp-small" else DDP(cap_bytes=4096, first_bucket_bytes=1024, name="ddp-small")
        out[s] = make_plan(planner, prof, cost)
    return out


def batch(rank: int, step: int, n: int = 4):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def emit(doc: dict) -> None:
    print("RESULT " + json.dumps(doc), flush=True)


def max_rel_diff(a: nn.Module, b: nn.Module) -> float:
    worst = 0.0
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        d = (p.detach().double() - q.detach().double()).abs().max().item()
        scale = max(q.detach().double().abs().max().item(), 1e-12)
        worst = max(worst, d / scale)
    return worst
