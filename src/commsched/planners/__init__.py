"""Planners: one module per strategy and a registry of the named ones."""

from __future__ import annotations

import warnings

from commsched.errors import CommschedError
from commsched.planners.adafusion import AdaFusion
from commsched.planners.base import Planner, ResourcePlanner, chooses_resources, make_plan, resource_planner
from commsched.planners.stock_ddp import DDP
from commsched.planners.horovod import Horovod, horovod_legacy
from commsched.planners.mgwfbp import MGWFBP
from commsched.planners.optimal import MIN_GAIN_OVER_DDP, Optimal, optimal_ends
from commsched.planners.libra import Libra
from commsched.planners.resources import Joint, RSGrid, RSHeuristic
from commsched.planners.simple import WFBP, SyncEASGD
from commsched.sim.semantics import NCCL, Semantics

STRATEGIES: dict[str, Planner] = {
    p.name: p
    for p in (WFBP(), SyncEASGD(), DDP(), Horovod(), horovod_legacy(), MGWFBP(), AdaFusion(), Optimal())
}


# Strategies that choose each all-reduce's resources: they need a cluster that declares them.
RESOURCE_STRATEGIES: dict[str, Planner] = {p.name: p for p in (RSGrid(), RSHeuristic(), Libra(), Joint())}


def planner(name: str) -> Planner:
    known = {**STRATEGIES, **RESOURCE_STRATEGIES}
    try:
        return known[name]
    except KeyError:
        raise CommschedError(f"unknown strategy {name!r}; choose from {', '.join(known)}") from None


def planner_for(name: str, semantics: Semantics = NCCL, tolerance: float = 0.01, min_gain: float | None = None) -> Planner:
    """The named strategy, planning for ``semantics`` where it can: ``optimal`` does (the optimum,
    :class:`Optimal`); the published strategies keep their own rules (they are scored under the
    semantics by :func:`make_plan`). ``min_gain`` is no longer the planner's: what to run is the
    recommendation's call (:func:`commsched.planners.compare.recommend`); passing it warns and changes nothing."""
    if min_gain is not None:
        warnings.warn(
            "planner_for(min_gain=...) is deprecated and ignored: optimal is always the optimum; "
            "commsched.planners.compare.recommend decides whether to run it rather than stock DDP's buckets",
            DeprecationWarning,
            stacklevel=2,
        )
    p = planner(name)
    return Optimal(semantics, tolerance=tolerance) if isinstance(p, Optimal) else p


__all__ = [
    "MIN_GAIN_OVER_DDP",
    "RESOURCE_STRATEGIES",
    "STRATEGIES",
    "Joint",
    "Libra",
    "RSGrid",
    "RSHeuristic",
    "AdaFusion",
    "DDP",
    "Horovod",
    "MGWFBP",
    "Optimal",
    "Planner",
    "ResourcePlanner",
    "chooses_resources",
    "resource_planner",
    "SyncEASGD",
    "WFBP",
    "horovod_legacy",
    "make_plan",
    "optimal_ends",
    "planner",
    "planner_for",
]
