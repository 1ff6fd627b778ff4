"""Plan a model with several strategies, compare them and recommend one: the library call behind
``commsched plan``.

Each strategy's row is its own plan: ``optimal`` is always the optimum. What to *run* is a separate
answer, the recommendation (:func:`recommend`): the fastest plan, unless it is predicted less than
``min_gain`` faster than stock DDP's default buckets, in which case those buckets, with the reason.
A plan is worth applying only when its predicted gain clears the error of the prediction: the
fastest plan is the one whose prediction is the most favourable, so its error leans that way (on
the emulated cluster `optimal`'s predicted gain over stock DDP was too high in 11 of 17 runs, by
1.8-3.3% in 4; :data:`~commsched.planners.MIN_GAIN_OVER_DDP` is the 90th percentile of that error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import CostModel
from commsched.planners import DDP, Optimal
from commsched.planners.base import Planner, plan_and_timeline
from commsched.planners.optimal import check_min_gain
from commsched.planners.resources import default_config_semantics
from commsched.planners.stock_ddp import MIB, ddp_with_cap
from commsched.sim.semantics import NCCL, Semantics
from commsched.types import ModelProfile, Plan, Timeline

STOCK = "ddp"  # the name stock DDP's default buckets go by when they are recommended
# their name when the listed "ddp" is not them (``--bucket-mb``'s caps): the two must not be confused
STOCK_DEFAULTS = "ddp-defaults"


@dataclass(frozen=True)
class StrategyResult:
    plan: Plan
    timeline: Timeline
    scaling_factor: float  # OSF Eq. 1 with a fixed per-worker batch: T_comp / T_iter
    speedup_vs_ddp: float  # default DDP's iteration time / this one's


@dataclass(frozen=True)
class Recommendation:
    """What to run: ``strategy``'s plan (``"ddp"``: stock DDP's default buckets at the library's
    default resources) and why, in one sentence."""

    strategy: str
    reason: str
    stock_kept: bool  # the fastest plan did not clear the min gain: stock DDP's buckets are kept

    def to_json(self) -> dict:
        return {"strategy": self.strategy, "reason": self.reason, "stock_kept": self.stock_kept}


def fastest(iteration_s: dict[str, float], buckets: dict[str, int] | None = None) -> str:
    """The strategy with the least predicted iteration; among ties (within 1e-9 relative) the one
    with the fewest ``buckets``, since each all-reduce costs a launch the model does not see; then
    the one listed first."""
    if not iteration_s:
        raise ValueError("no strategy to choose from")
    least = min(iteration_s.values())
    tied = [k for k, t in iteration_s.items() if t <= least + 1e-9 * abs(least)]
    return min(tied, key=lambda k: (buckets or {}).get(k, 0))


def recommend(iteration_s: dict[str, float], stock: Sequence[str], stock_s: float, min_gain: float, buckets: dict[str, int] | None = None) -> Recommendation:
    """The recommendation among strategies with predicted ``iteration_s``: the fastest
    (:func:`fastest`), unless ``min_gain`` > 0 and it is predicted less than that fraction faster
    than stock DDP's default buckets (``stock_s``):
    then stock DDP's buckets, named by the first of ``stock`` (the strategies whose plan is exactly
    them), else ``"ddp"``, else, where a listed ``"ddp"`` is other buckets (its own caps),
    ``"ddp-defaults"``. Where stock DDP's buckets tie with the fastest they are recommended, named
    ``"ddp"`` if it is among ``stock``. A strategy "clears" the gain when its iteration is at most (1 - G) x stock's.
    With ``min_gain`` 0 the fastest listed is recommended even where predicted slower than stock
    DDP's buckets, and the reason says so."""
    check_min_gain(min_gain)
    best = fastest(iteration_s, buckets)
    gain = stock_s / iteration_s[best] - 1.0
    least = iteration_s[best]
    # stock DDP's buckets among the fastest: run them, named "ddp" where listed (not wfbp or
    # synceasgd, which a one-tensor model or one bucket makes the same plan)
    tied_stock = [k for k in stock if iteration_s[k] <= least + 1e-9 * abs(least)]
    if tied_stock:
        name = STOCK if STOCK in tied_stock else tied_stock[0]
        return Recommendation(name, f"{name} is stock DDP's default buckets and the fastest predicted", False)
    if not min_gain:
        against = "over" if gain >= 0 else "against"
        slower = "" if gain >= 0 else " (slower: --min-gain 0 recommends the fastest listed, whatever it gains)"
        return Recommendation(best, f"the fastest predicted: {gain:+.1%} {against} stock DDP's default buckets{slower}", False)
    if iteration_s[best] <= stock_s * (1.0 - min_gain):
        return Recommendation(best, f"predicted {gain:+.1%} over stock DDP's default buckets, clearing the min gain of {min_gain:.1%}", False)
    name = stock[0] if stock else (STOCK if STOCK not in iteration_s else STOCK_DEFAULTS)
    predicted = f"only {gain:+.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"
    return Recommendation(
        name,
        f"stock DDP's default buckets: the fastest plan ({best}) is predicted {predicted}, under the "
        f"min gain of {min_gain:.1%} (the prediction's measured error; --min-gain 0 recommends the fastest)",
        True,
    )


@dataclass(frozen=True)
class Comparison:
    profile: ModelProfile
    cluster: ClusterSpec
    results: dict[str, StrategyResult]
    semantics: Semantics = NCCL
    min_gain: float = 0.0  # what the recommendation asks of a plan over stock DDP's default buckets
    stock: StrategyResult | None = None  # stock DDP's default buckets at the library's default resources

    @property
    def best(self) -> str:
        """The fastest strategy (:func:`fastest`); what to run is :attr:`recommended`."""
        return fastest({k: r.timeline.iteration_s for k, r in self.results.items()}, {k: len(r.plan.buckets) for k, r in self.results.items()})

    @property
    def stock_names(self) -> tuple[str, ...]:
        """The strategies whose plan is stock DDP's default buckets at the library's default
        resources (a resource strategy that kept DDP's buckets with other resources is not one)."""
        if self.stock is None:
            return ()
        return tuple(
            k for k, r in self.results.items()
            if same_buckets(r.plan, self.stock.plan) and all(b.resources is None for b in r.plan.buckets)
        )

    @property
    def recommended(self) -> Recommendation:
        """What to run (:func:`recommend` with this comparison's ``min_gain``)."""
        stock_s = self.stock.timeline.iteration_s if self.stock is not None else min(r.timeline.iteration_s for r in self.results.values())
        return recommend(
            {k: r.timeline.iteration_s for k, r in self.results.items()}, self.stock_names, stock_s,
            self.min_gain if self.stock is not None else 0.0,
            {k: len(r.plan.buckets) for k, r in self.results.items()},
        )

    @property
    def rows(self) -> dict[str, StrategyResult]:
        """The listed strategies, and stock DDP's default buckets (as ``"ddp"``, or ``"ddp-defaults"``
        beside a listed ``"ddp"`` of other caps) when they are recommended without being listed: what
        a table of the comparison shows."""
        rec = self.recommended.strategy
        if rec in self.results or self.stock is None:
            return dict(self.results)
        return {**self.results, rec: self.stock}

    def result(self, name: str) -> StrategyResult:
        """A strategy's result; ``"ddp"`` is stock DDP's default buckets when not listed, and
        ``"ddp-defaults"`` always."""
        if name == STOCK_DEFAULTS and self.stock is not None:
            return self.stock
        if name in self.results:
            return self.results[name]
        if name == STOCK and self.stock is not None:
            return self.stock
        raise KeyError(name)


def compare(
    profile: ModelProfile, cluster: ClusterSpec, planners: Sequence[Planner], semantics: Semantics = NCCL, min_gain: float = 0.0
) -> Comparison:
    """Every planner's plan scored under ``semantics`` (the runtime that will run them); ``optimal``
    plans for those semantics. ``min_gain``: what :attr:`Comparison.recommended` asks of a plan over
    stock DDP's default buckets; 0 recommends the fastest, where ``plan`` and ``plan_for`` ask
    ``MIN_GAIN_OVER_DDP`` (0.03)."""
    check_min_gain(min_gain)
    cost, res = cluster.allreduce, cluster.resources
    stock_plan, stock_tl = plan_and_timeline(DDP(), profile, cost, semantics, res)
    t_ddp = stock_tl.iteration_s

    def result(plan: Plan, timeline: Timeline) -> StrategyResult:
        return StrategyResult(
            plan=plan,
            timeline=timeline,
            scaling_factor=(profile.compute_s + profile.optimizer_s) / timeline.iteration_s,
            speedup_vs_ddp=t_ddp / timeline.iteration_s,
        )

    results: dict[str, StrategyResult] = {}
    for p in planners:
        if isinstance(p, Optimal):
            p = replace(p, semantics=semantics if res is None else default_config_semantics(res, semantics))
        plan, timeline = plan_and_timeline(p, profile, cost, semantics, res)
        results[plan.strategy] = result(plan, timeline)
    return Comparison(profile, cluster, results, semantics, min_gain, result(stock_plan, stock_tl))


def same_buckets(a: Plan, b: Plan) -> bool:
    """Whether two plans reduce the same tensors together in the same order (resources aside)."""
    return [bk.tensors for bk in a.buckets] == [bk.tensors for bk in b.buckets]


def plan_label(plan: Plan) -> str:
    """How a person names the plan: ``bucket_cap_mb=X`` for DDP with one cap for every bucket (as
    :func:`~commsched.planners.stock_ddp.ddp_with_cap` builds it), else its strategy."""
    cap, first = plan.params.get("cap_bytes"), plan.params.get("first_bucket_bytes")
    if plan.strategy == "ddp" and cap is not None and cap == first:
        return f"bucket_cap_mb={cap / MIB:g}"
    return plan.strategy


def ranked_caps(
    profile: ModelProfile, cost: CostModel, semantics: Semantics, caps_mb: Sequence[float], others: Sequence[Plan], than_s: float
) -> list[tuple[Plan, float]]:
    """The plans of DDP's ``bucket_cap_mb`` among ``caps_mb`` with their predicted iterations under
    ``semantics``, fastest first (equal times: fewer buckets first): those whose buckets differ from
    every plan of ``others`` and from each other (of caps with the same buckets, the first listed)
    and that are predicted faster than ``than_s``. The caps a user sweeps by hand, ranked by the
    model instead of measured one by one (tuning's race)."""
    scored: list[tuple[float, int, Plan]] = []
    for mb in caps_mb:
        plan, timeline = plan_and_timeline(ddp_with_cap(mb), profile, cost, semantics)
        t = timeline.iteration_s
        if t >= than_s or any(same_buckets(plan, o) for o in others) or any(same_buckets(plan, p) for _, _, p in scored):
            continue
        scored.append((t, len(plan.buckets), plan))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [(plan, t) for t, _, plan in scored]
