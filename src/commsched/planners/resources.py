"""Planners that choose each all-reduce's resources (NCCL blocks x threads per block) as well as,
or instead of, its buckets. They plan on a cluster with :class:`~commsched.cost.resource_models.ClusterResources`
and return ``assign(profile, cost, resources) -> (bucket ends, one config per bucket)``; every plan
is scored by :func:`commsched.sim.events.simulate_resources`.

- ``rs-grid``: the resource-sharing paper's grid search (Section 4.3-4.4): DDP's default buckets,
  one config for all of them, the one with the least predicted iteration time.
- ``rs-heuristic``: the same paper's rule (Sections 4.3.1 and 5): the last all-reduce, which
  nothing overlaps, gets the config that ends it soonest; every other gets the least resources that
  still let it end before the backward pass does, or, where no config does, the one that gives the
  least iteration time.
- ``joint``: every contiguous bucketing x every config per bucket, the least predicted iteration
  time (:class:`Joint`). LIBRA's programme is in :mod:`commsched.planners.libra`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commsched.cost.resource_models import ClusterResources, ConstantContention, GridContention, ResourceConfig
from commsched.cost.models import CostModel
from commsched.planners.stock_ddp import DDP
from commsched.planners.libra import Libra
from commsched.planners.base import resource_planner
from commsched.planners.optimal import check_tolerance
from commsched.planners.optimal_contended import certified, front_search, transitions
from commsched.sim.events import resource_events as run_events
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import prefix_bytes
from commsched.types import ModelProfile


@resource_planner
@dataclass(frozen=True)
class RSGrid:
    """One config for every bucket of DDP's default bucketing: the best of the allowed ones."""

    name: str = "rs-grid"

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources):
        ends = DDP().ends(profile, cost)
        best = None
        for cfg in resources.allowed:  # least GPU threads first: ties keep the lightest
            t = max(run_events(profile, ends, cost, resources, [cfg] * len(ends))[1])
            if best is None or t < best[0] * (1 - 1e-12):
                best = (t, cfg)
        assert best is not None
        return ends, (best[1],) * len(ends)


@resource_planner
@dataclass(frozen=True)
class RSHeuristic:
    """The resource-sharing paper's rule on DDP's default buckets (module docstring).

    Buckets are decided in order; while bucket j is decided, the earlier ones keep their configs,
    the later ones (but the last) take the least config and the last its fastest, as the rule will
    give them if they can. "Ends before the backward pass does" is judged in that run.
    """

    name: str = "rs-heuristic"

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources):
        ends = DDP().ends(profile, cost)
        nb = len(ends)
        order = resources.allowed  # from the least GPU threads to the most
        pb = prefix_bytes(profile)
        last_bytes = pb[ends[-1]] - pb[ends[-2] if nb > 1 else 0]
        fastest = min(order, key=lambda c: float(resources.allreduce_s(cost, last_bytes, c, False)))
        configs = [order[0]] * (nb - 1) + [fastest]
        for j in range(nb - 1):
            chosen, best = None, None
            for cfg in order:
                trial = configs[:j] + [cfg] + configs[j + 1 :]
                _, finishes, backward_end = run_events(profile, ends, cost, resources, trial)
                if finishes[j] <= backward_end:
                    chosen = cfg
                    break
                t = max(finishes)
                if best is None or t < best[0] * (1 - 1e-12):
                    best = (t, cfg)
            configs[j] = chosen if chosen is not None else best[1]  # type: ignore[index]
        return ends, tuple(configs)


def default_config_semantics(resources: ClusterResources, fallback: Semantics = NCCL) -> Semantics:
    """The two constant factors that every all-reduce at the library default config amounts to,
    so planners that plan for :class:`~commsched.sim.semantics.Semantics` (``optimal``) plan for
    what a default-config run is scored with: exact for a constant model and for a grid whose
    default entry is the cluster's cost model (relative time 1 at every size); ``fallback`` else."""
    model, cfg = resources.contention, resources.default
    if isinstance(model, ConstantContention):
        return Semantics(compute_slowdown=model.compute_slowdown, comm_slowdown=model.comm_slowdown)
    if isinstance(model, GridContention):
        e = model.entry(cfg)
        if all(f == 1.0 for _, f in e.relative_time):
            return Semantics(compute_slowdown=e.compute_factor - 1.0, comm_slowdown=e.overlap_factor - 1.0)
    return fallback


@resource_planner
@dataclass(frozen=True)
class Joint:
    """The least predicted iteration time over every contiguous bucketing and every config per
    bucket, under the cluster's contention model (beyond the papers: LIBRA fixes at most K groups
    and discretises compute; the resource-sharing paper keeps DDP's buckets).

    :func:`~commsched.planners.optimal_contended.front_search` with one option per allowed config:
    states (end of the last all-reduce, compute progress), the Pareto front kept per tensor. Exact
    with ``tolerance`` 0, within a factor 1 + ``tolerance`` otherwise (the proof in that module;
    where a config's all-reduce runs faster beside compute than alone, against LIBRA's Assumption
    2, the front is ordered by end time plus kappa x progress, and dominated configs are not
    dropped).

    The plans of the planners it is claimed to beat seed it (issue 31): ``libra`` (co-optimised,
    K = 10, Z = 150), ``rs-grid`` (DDP's buckets at the best single config), ``rs-heuristic``, stock
    DDP (its buckets at the library default config) and one bucket at every config. The best of them
    bounds the search, and the search's plan is kept only where the simulator scores it below that
    bound, so ``joint`` is never predicted slower than any of them on the same inputs, whatever
    ``tolerance`` (the search alone may stop within 1 + ``tolerance`` of the optimum short of
    one of them).
    """

    tolerance: float = 0.01
    name: str = "joint"

    def __post_init__(self) -> None:
        check_tolerance(self.tolerance)

    def optimality(self, resources: ClusterResources) -> str:
        return "exact" if self.tolerance == 0 else f"within {self.tolerance:g} of the optimum"

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources):
        known = min((max(run_events(profile, e, cost, resources, cs)[1]), len(e), e, cs) for e, cs in seed_plans(profile, cost, resources))
        ends, configs, _ = joint_search(profile, cost, resources, self.tolerance, known[0])
        if not ends:
            return known[2], known[3]
        # the simulator has the last word: the search's own estimate of its end is not compared
        found = max(run_events(profile, ends, cost, resources, configs)[1])
        return (ends, configs) if found < known[0] else (known[2], known[3])


def seed_plans(profile: ModelProfile, cost: CostModel, resources: ClusterResources) -> list:
    """The plans :class:`Joint` must never be predicted slower than, as (bucket ends, configs):
    ``libra``'s, ``rs-grid``'s, ``rs-heuristic``'s, stock DDP's (its default buckets, all at the
    library default config) and one bucket at every allowed config."""
    n = len(profile.tensors)
    ddp_ends = DDP().ends(profile, cost)
    plans = [
        Libra().assign(profile, cost, resources),
        RSGrid().assign(profile, cost, resources),
        RSHeuristic().assign(profile, cost, resources),
        (ddp_ends, (resources.default,) * len(ddp_ends)),
    ]
    return plans + [((n,), (c,)) for c in resources.allowed]


def joint_search(
    profile: ModelProfile,
    cost: CostModel,
    resources: ClusterResources,
    tolerance: float,
    upper_bound_s: float = float("inf"),
    drop_dominated: bool | None = None,
):
    """:class:`Joint`'s search alone: (ends, configs, end of the last all-reduce); empty when
    nothing beats ``upper_bound_s``. ``drop_dominated`` (default: when LIBRA's Assumption 2 holds
    for every config, which it needs) skips configs another makes useless for a bucket."""
    configs = resources.allowed

    # through the cluster's resources, not the model alone: on stock NCCL each size runs as the
    # config NCCL uses there (ClusterResources.effective), as the simulator scores it
    def option_for(cfg: ResourceConfig):
        def option(k2, nbytes):
            alone = np.asarray(resources.allreduce_s(cost, nbytes, cfg, False), dtype=np.float64)
            over = np.asarray(resources.allreduce_s(cost, nbytes, cfg, True), dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                return alone, np.where(alone > 0, over / alone, 1.0), resources.compute_factor(cfg, nbytes)

        return option

    def least(nbytes, overlapped_too: bool = True):
        ts = [np.asarray(resources.allreduce_s(cost, nbytes, c, False), dtype=np.float64) for c in configs]
        if overlapped_too:
            ts += [np.asarray(resources.allreduce_s(cost, nbytes, c, True), dtype=np.float64) for c in configs]
        return np.min(ts, axis=0)

    drop = all(resources.never_faster_overlapped(c) for c in configs) if drop_dominated is None else drop_dominated
    options = [option_for(c) for c in configs]
    work, sizes = [t.backward_s for t in profile.tensors], [t.bytes for t in profile.tensors]
    table = transitions(sizes, options, least, lambda b: least(b, False), drop_dominated=drop)
    ends, end_s, chosen = certified(
        lambda tol, bound, optimistic, budget: front_search(profile.forward_s, work, table, bound, tol, optimistic=optimistic, budget=budget),
        tolerance,
        upper_bound_s,
    )
    return ends, tuple(configs[o] for o in chosen), end_s
