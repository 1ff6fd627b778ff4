"""What a planner is, and how its bucketing becomes a scored :class:`~commsched.types.Plan`.

A planner is a frozen dataclass with a ``name`` and ``ends(profile, cost) -> bucket ends`` (exclusive
end index of each bucket in ready order). Planners never simulate for the caller: :func:`make_plan`
scores every plan with the one simulator under the runtime's execution semantics
(:mod:`commsched.sim.semantics`; NCCL's serial run by default), so all strategies are compared alike.
The published strategies keep their own rules whatever the semantics; ``optimal`` plans for them
(:func:`commsched.planners.planner_for`).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Protocol

from commsched.cost.resource_models import ClusterResources
from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.sim.events import simulate_resources, simulate_run
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import buckets_of
from commsched.types import ModelProfile, Plan, Timeline


class Planner(Protocol):
    @property
    def name(self) -> str: ...

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]: ...


class ResourcePlanner(Protocol):
    """A planner that chooses each all-reduce's resources as well as (or instead of) its buckets:
    ``assign(profile, cost, resources) -> (bucket ends, one config per bucket)``. Such planners are
    declared with :func:`resource_planner`; :func:`chooses_resources` asks the registry."""

    @property
    def name(self) -> str: ...

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources): ...


_RESOURCE_PLANNER_TYPES: set[type] = set()


def resource_planner(cls: type) -> type:
    """Class decorator: declares ``cls`` a :class:`ResourcePlanner` (it must define ``assign``)."""
    if not callable(getattr(cls, "assign", None)):
        raise TypeError(f"{cls.__name__} is declared a resource planner but has no assign()")
    _RESOURCE_PLANNER_TYPES.add(cls)
    return cls


def chooses_resources(planner: object) -> bool:
    """Whether ``planner`` chooses each all-reduce's resources (it was declared with :func:`resource_planner`)."""
    return type(planner) in _RESOURCE_PLANNER_TYPES


def plan_and_timeline(
    planner: Planner, profile: ModelProfile, cost: CostModel, semantics: Semantics = NCCL, resources: ClusterResources | None = None
) -> tuple[Plan, Timeline]:
    """The planner's plan, scored by the simulator under ``semantics``, and the timeline it was scored on.

    On a cluster with per-bucket ``resources`` every plan is scored by the resource simulator under
    the cluster's contention model, one all-reduce at a time (NCCL); a planner that does not choose
    resources gets the library default for every bucket (its buckets say ``resources: null``).
    """
    configs = None
    if resources is not None:
        if semantics.threads != 1 or semantics.contended:
            raise CommschedError(
                "a cluster with per-bucket resources is scored with its own contention model, one all-reduce at a time "
                f"(NCCL); it cannot also take the runtime semantics {semantics.backend!r} with their own contention"
            )
        if chooses_resources(planner):
            ends, configs = planner.assign(profile, cost, resources)  # type: ignore[attr-defined]
        else:
            ends = planner.ends(profile, cost)
        timeline = simulate_resources(profile, ends, cost, resources, configs or [resources.default] * len(ends))
    elif chooses_resources(planner):
        raise CommschedError(
            f"strategy {planner.name!r} chooses each all-reduce's resources and needs a cluster that declares them "
            f"(\"resources\" in its JSON, e.g. the preset rs-2xv100s-pcie)"
        )
    else:
        ends = planner.ends(profile, cost)
        timeline = simulate_run(profile, ends, cost, semantics)
    params = {k: v for k, v in asdict(planner).items() if k != "name"}  # type: ignore[call-overload]
    if isinstance(getattr(planner, "semantics", None), Semantics):
        params["semantics"] = planner.semantics.to_json()  # type: ignore[attr-defined]
    if hasattr(planner, "exact_for"):
        params["optimality"] = planner.exact_for()  # type: ignore[attr-defined]
    if hasattr(planner, "optimality") and resources is not None:
        params["optimality"] = planner.optimality(resources)  # type: ignore[attr-defined]
    if semantics != NCCL:
        params["scored_under"] = semantics.to_json()
    buckets = buckets_of(profile, ends)
    if resources is not None:
        params["scored_under"] = {"resources": resources.to_json()}
        if configs is not None:
            buckets = tuple(replace(b, resources=c.to_json()) for b, c in zip(buckets, configs))
    plan = Plan(
        strategy=planner.name,
        model=profile.model,
        buckets=buckets,
        predicted=timeline.prediction(),
        params=params,
    )
    return plan, timeline


def make_plan(
    planner: Planner, profile: ModelProfile, cost: CostModel, semantics: Semantics = NCCL, resources: ClusterResources | None = None
) -> Plan:
    return plan_and_timeline(planner, profile, cost, semantics, resources)[0]
