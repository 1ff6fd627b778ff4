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
    min_gain: float = 0.0  # what the best must be predicted to gain over stock DDP's default buckets
    stock_buckets: tuple[tuple[str, ...], ...] = ()  # stock DDP's default buckets (names), as planned

    @property
    def best(self) -> str:
        """The fastest strategy; among ties (within 1e-9 relative), the one with the fewest buckets,
        since each all-reduce costs a launch the model does not see; then the one listed first.
        With ``min_gain``, a strategy whose plan is stock DDP's default buckets (listed first among
        them) unless the fastest is predicted at least that much faster than them, as
        :class:`~commsched.planners.Optimal` keeps them."""
        fastest = min(r.timeline.iteration_s for r in self.results.values())
        tied = [k for k, r in self.results.items() if r.timeline.iteration_s <= fastest + 1e-9 * abs(fastest)]
        best = min(tied, key=lambda k: len(self.results[k].plan.buckets))
        if not self.min_gain:
            return best
        # stock DDP itself: its buckets with the library's default resources (not rs-grid's choice)
        stock = [
            k for k, r in self.results.items()
            if tuple(b.tensors for b in r.plan.buckets) == self.stock_buckets and all(b.resources is None for b in r.plan.buckets)
        ]
        if stock and self.results[best].speedup_vs_ddp < 1.0 / (1.0 - self.min_gain):
            return stock[0]
        return best


def compare(
    profile: ModelProfile, cluster: ClusterSpec, planners: Sequence[Planner], semantics: Semantics = NCCL, min_gain: float = 0.0
) -> Comparison:
    """Every planner's plan scored under ``semantics`` (the runtime that will run them); ``optimal``
    plans for those semantics. ``min_gain``: what :attr:`Comparison.best` asks of a plan over stock
    DDP's default buckets (``optimal`` takes its own, :class:`~commsched.planners.Optimal`)."""
    cost, res = cluster.allreduce, cluster.resources
    stock = make_plan(DDP(), profile, cost, semantics, res)
    ddp_default = stock.predicted
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
    return Comparison(profile, cluster, results, semantics, min_gain, tuple(b.tensors for b in stock.buckets))
