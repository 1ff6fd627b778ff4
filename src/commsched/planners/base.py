"""What a planner is, and how its bucketing becomes a scored :class:`~commsched.types.Plan`.

A planner is a frozen dataclass with a ``name`` and ``ends(profile, cost) -> bucket ends`` (exclusive
end index of each bucket in ready order). Planners never simulate for the caller: :func:`make_plan`
scores every plan with the one simulator under the runtime's execution semantics
(:mod:`commsched.sim.semantics`; NCCL's serial run by default), so all strategies are compared alike.
The published strategies keep their own rules whatever the semantics; ``optimal`` plans for them
(:func:`commsched.planners.planner_for`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Protocol

from commsched.cost.models import CostModel
from commsched.sim.contention import simulate_run
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import buckets_of
from commsched.types import ModelProfile, Plan, Timeline


class Planner(Protocol):
    @property
    def name(self) -> str: ...

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]: ...


def plan_and_timeline(
    planner: Planner, profile: ModelProfile, cost: CostModel, semantics: Semantics = NCCL
) -> tuple[Plan, Timeline]:
    """The planner's plan, scored by the simulator under ``semantics``, and the timeline it was scored on."""
    ends = planner.ends(profile, cost)
    timeline = simulate_run(profile, ends, cost, semantics)
    params = {k: v for k, v in asdict(planner).items() if k != "name"}  # type: ignore[call-overload]
    if isinstance(getattr(planner, "semantics", None), Semantics):
        params["semantics"] = planner.semantics.to_json()  # type: ignore[attr-defined]
    if hasattr(planner, "exact_for"):
        params["optimality"] = planner.exact_for()  # type: ignore[attr-defined]
    if semantics != NCCL:
        params["scored_under"] = semantics.to_json()
    plan = Plan(
        strategy=planner.name,
        model=profile.model,
        buckets=buckets_of(profile, ends),
        predicted=timeline.prediction(),
        params=params,
    )
    return plan, timeline


def make_plan(planner: Planner, profile: ModelProfile, cost: CostModel, semantics: Semantics = NCCL) -> Plan:
    return plan_and_timeline(planner, profile, cost, semantics)[0]
