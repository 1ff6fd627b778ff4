"""Plan a model with several strategies and compare them: the library call behind ``commsched plan``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commsched.cost.cluster import ClusterSpec
from dataclasses import replace

from commsched.planners import DDP, Optimal, make_plan
from commsched.planners.base import Planner, plan_and_timeline
from commsched.planners.resources import default_config_semantics
from commsched.sim.semantics import NCCL, Semantics
from commsched.types import ModelProfile, Plan, Timeline


@dataclass(frozen=True)
class StrategyResult:
    plan: Plan
    timeline: Timeline
    scaling_factor: float  # OSF Eq. 1 with a fixed per-worker batch: T_comp / T_iter
    speedup_vs_ddp: float  # default DDP's iteration time / this one's


@dataclass(frozen=True)
class Comparison:
    profile: ModelProfile
    cluster: ClusterSpec
    results: dict[str, StrategyResult]
    semantics: Semantics = NCCL

    @property
    def best(self) -> str:
        """The fastest strategy; among ties (within 1e-9 relative), the one with the fewest buckets,
        since each all-reduce costs a launch the model does not see; then the one listed first."""
        fastest = min(r.timeline.iteration_s for r in self.results.values())
        tied = [k for k, r in self.results.items() if r.timeline.iteration_s <= fastest + 1e-9 * abs(fastest)]
        return min(tied, key=lambda k: len(self.results[k].plan.buckets))


def compare(profile: ModelProfile, cluster: ClusterSpec, planners: Sequence[Planner], semantics: Semantics = NCCL) -> Comparison:
    """Every planner's plan scored under ``semantics`` (the runtime that will run them); ``optimal``
    plans for those semantics."""
    cost, res = cluster.allreduce, cluster.resources
    ddp_default = make_plan(DDP(), profile, cost, semantics, res).predicted
    assert ddp_default is not None
    t_ddp = ddp_default.iteration_s
    results: dict[str, StrategyResult] = {}
    for p in planners:
        if isinstance(p, Optimal):
            p = replace(p, semantics=semantics if res is None else default_config_semantics(res, semantics))
        plan, timeline = plan_and_timeline(p, profile, cost, semantics, res)
        results[plan.strategy] = StrategyResult(
            plan=plan,
            timeline=timeline,
            scaling_factor=(profile.compute_s + profile.optimizer_s) / timeline.iteration_s,
            speedup_vs_ddp=t_ddp / timeline.iteration_s,
        )
    return Comparison(profile, cluster, results, semantics)
