"""Planners that choose each all-reduce's resources (NCCL blocks x threads per block) as well as,
or instead of, its buckets. They plan on a cluster with :class:`~commsched.cost.contention.ClusterResources`
and return ``assign(profile, cost, resources) -> (bucket ends, one config per bucket)``; every plan
is scored by :func:`commsched.sim.contention.simulate_resources`.

- ``rs-grid``: the resource-sharing paper's grid search (Section 4.3-4.4): DDP's default buckets,
  one config for all of them, the one with the least predicted iteration time.
- ``rs-heuristic``: the same paper's rule (Sections 4.3.1 and 5): the last all-reduce, which
  nothing overlaps, gets the config that ends it soonest; every other gets the least resources that
  still let it end before the backward pass does, or, where no config does, the one that gives the
  least iteration time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from commsched.cost.contention import ClusterResources, ConstantContention, GridContention, ResourceConfig
from commsched.cost.models import CostModel
from commsched.planners.ddp import DDP
from commsched.sim.contention import resource_terms
from commsched.sim.contention import _events as _run_events
from commsched.sim.semantics import NCCL, Semantics
from commsched.sim.timeline import prefix_bytes
from commsched.types import ModelProfile


def run_events(profile: ModelProfile, ends: Sequence[int], cost: CostModel, resources: ClusterResources, configs):
    """(starts, ends of each all-reduce, end of backward) of the resource simulator, no timeline built."""
    pb = prefix_bytes(profile)
    per_bucket = resource_terms(pb, ends, cost, resources, configs)
    return _run_events(profile.forward_s, [t.backward_s for t in profile.tensors], pb, ends, cost, NCCL, per_bucket)


def _least_first(resources: ClusterResources) -> list[ResourceConfig]:
    """Configs from the least GPU threads to the most (fewer blocks first on a tie)."""
    return sorted(resources.allowed, key=lambda c: (c.threads, c.blocks, c.threads_per_block))


@dataclass(frozen=True)
class RSGrid:
    """One config for every bucket of DDP's default bucketing: the best of the allowed ones."""

    name: str = "rs-grid"

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources):
        ends = DDP().ends(profile, cost)
        best = None
        for cfg in _least_first(resources):
            t = max(run_events(profile, ends, cost, resources, [cfg] * len(ends))[1])
            if best is None or t < best[0] * (1 - 1e-12):
                best = (t, cfg)
        assert best is not None
        return ends, (best[1],) * len(ends)


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
        order = _least_first(resources)
        pb = prefix_bytes(profile)
        last_bytes = pb[ends[-1]] - pb[ends[-2] if nb > 1 else 0]
        fastest = min(order, key=lambda c: float(resources.contention.allreduce_s(cost, last_bytes, c, False)))
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
