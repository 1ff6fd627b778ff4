"""Planners: one module per strategy and a registry of the named ones."""

from __future__ import annotations

from commsched.errors import CommschedError
from commsched.planners.adafusion import AdaFusion
from commsched.planners.base import Planner, make_plan
from commsched.planners.ddp import DDP
from commsched.planners.horovod import Horovod, horovod_legacy
from commsched.planners.mgwfbp import MGWFBP
from commsched.planners.optimal import Optimal, optimal_ends
from commsched.planners.simple import WFBP, SyncEASGD

STRATEGIES: dict[str, Planner] = {
    p.name: p
    for p in (WFBP(), SyncEASGD(), DDP(), Horovod(), horovod_legacy(), MGWFBP(), AdaFusion(), Optimal())
}


def planner(name: str) -> Planner:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise CommschedError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None


__all__ = [
    "STRATEGIES",
    "AdaFusion",
    "DDP",
    "Horovod",
    "MGWFBP",
    "Optimal",
    "Planner",
    "SyncEASGD",
    "WFBP",
    "horovod_legacy",
    "make_plan",
    "optimal_ends",
    "planner",
]
