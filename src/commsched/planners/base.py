"""What a planner is, and how its bucketing becomes a scored :class:`~commsched.types.Plan`.

A planner is a frozen dataclass with a ``name`` and ``ends(profile, cost) -> bucket ends`` (exclusive
end index of each bucket in ready order). Planners never simulate for the caller: :func:`make_plan`
scores every plan with the one simulator, so all strategies are compared under the same semantics.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Protocol

from commsched.cost.models import CostModel
from commsched.sim.timeline import buckets_of, simulate
from commsched.types import ModelProfile, Plan, Timeline


class Planner(Protocol):
    @property
    def name(self) -> str: ...

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]: ...


def plan_and_timeline(planner: Planner, profile: ModelProfile, cost: CostModel) -> tuple[Plan, Timeline]:
    """The planner's plan, scored by the simulator, and the simulated timeline it was scored on."""
    ends = planner.ends(profile, cost)
    timeline = simulate(profile, ends, cost)
    params = {k: v for k, v in asdict(planner).items() if k != "name"}  # type: ignore[call-overload]
    plan = Plan(
        strategy=planner.name,
        model=profile.model,
        buckets=buckets_of(profile, ends),
        predicted=timeline.prediction(),
        params=params,
    )
    return plan, timeline


def make_plan(planner: Planner, profile: ModelProfile, cost: CostModel) -> Plan:
    return plan_and_timeline(planner, profile, cost)[0]
