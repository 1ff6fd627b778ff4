"""Which layers cost the scaling, and what replacing them would give (OSF Section 4.1, Table 3).

OSF (Liu et al.) Section 4.1 replaces VGG-16's fully connected layers with 1x1 convolutions and a
global average pooling layer, because those layers hold most of the model's bytes and their
all-reduce cannot be hidden behind the little backward compute that follows them. :func:`rank_layers`
finds such layers for any model: a layer's cost is the non-overlapped communication (iteration time
minus compute, what OSF Eq. 3 charges beyond T_comp) that disappears when that layer's gradients
cost nothing to all-reduce, with the plan re-made for that model by the same strategy. "Cost
nothing" is a gradient of 1 byte (a tensor must have bytes): its backward compute stays, and under
a strategy that sends it alone its all-reduce startup stays too, a residual of one alpha per
tensor. Layers are the tensors' owning modules (the name up to its last dot).

A layer's saving can be negative: a heuristic strategy's plan for the cheaper model can be worse
(MG-WFBP's merges, Horovod's cycles); `optimal` never gives a negative one on a plain cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from commsched.planners.compare import compare
from commsched.cost.cluster import ClusterSpec
from commsched.errors import CommschedError
from commsched.planners.base import Planner
from commsched.sim.semantics import NCCL, Semantics
from commsched.types import ModelProfile

__all__ = ["LayerCost", "LayerRanking", "layer_of", "rank_layers", "scaling_factors"]


@dataclass(frozen=True)
class LayerCost:
    layer: str
    tensors: tuple[str, ...]
    bytes: int
    saved_s: float  # non-overlapped communication gone when this layer's gradients cost nothing


@dataclass(frozen=True)
class LayerRanking:
    model: str
    cluster: str
    workers: int
    strategy: str
    iteration_s: float
    compute_s: float
    layers: tuple[LayerCost, ...]  # most saved first

    @property
    def non_overlapped_s(self) -> float:
        return self.iteration_s - self.compute_s

    @property
    def scaling_factor(self) -> float:
        """OSF Eq. 1 with a fixed per-worker batch: T_comp / T_iter (as :mod:`commsched.planners.compare`)."""
        return self.compute_s / self.iteration_s


def layer_of(tensor: str) -> str:
    """The module that owns a gradient tensor: ``features.0.weight`` -> ``features.0``."""
    return tensor.rsplit(".", 1)[0] if "." in tensor else tensor


def _iteration_s(profile: ModelProfile, cluster: ClusterSpec, planner: Planner, semantics: Semantics) -> tuple[str, float]:
    cmp = compare(profile, cluster, [planner], semantics)
    (name, result), = cmp.results.items()
    return name, result.timeline.iteration_s


def rank_layers(
    profile: ModelProfile,
    cluster: ClusterSpec,
    planner: Planner,
    semantics: Semantics = NCCL,
    progress: Callable[[int], None] | None = None,
) -> LayerRanking:
    """Every layer's non-overlapped communication, most first (one re-plan per layer)."""
    if cluster.resources is not None:
        raise CommschedError(
            f"cluster {cluster.name!r} has per-bucket resources; rank layers on a cluster without them "
            "(the ranking compares plain plans)"
        )
    strategy, full_s = _iteration_s(profile, cluster, planner, semantics)
    compute_s = profile.compute_s + profile.optimizer_s
    layers: dict[str, list[int]] = {}
    for i, t in enumerate(profile.tensors):
        layers.setdefault(layer_of(t.name), []).append(i)
    costs = []
    for layer, idx in layers.items():
        free = set(idx)
        cheaper = replace(
            profile, tensors=tuple(replace(t, bytes=1) if i in free else t for i, t in enumerate(profile.tensors))
        )
        _, without_s = _iteration_s(cheaper, cluster, planner, semantics)
        costs.append(
            LayerCost(
                layer=layer,
                tensors=tuple(profile.tensors[i].name for i in idx),
                bytes=sum(profile.tensors[i].bytes for i in idx),
                saved_s=full_s - without_s,
            )
        )
        if progress is not None:
            progress(1)
    costs.sort(key=lambda c: (-c.saved_s, -c.bytes, c.layer))
    return LayerRanking(profile.model, cluster.name, cluster.workers, strategy, full_s, compute_s, tuple(costs))


def scaling_factors(
    profiles: Sequence[ModelProfile],
    cluster: ClusterSpec,
    workers: Sequence[int],
    planner: Planner,
    semantics: Semantics = NCCL,
) -> dict[str, dict[int, float]]:
    """Scaling factor (OSF Eq. 1, T_comp / T_iter) of each model at each worker count."""
    out: dict[str, dict[int, float]] = {}
    for p in profiles:
        row = out.setdefault(p.model, {})
        for n in workers:
            _, it = _iteration_s(p, cluster.with_workers(n), planner, semantics)
            row[n] = (p.compute_s + p.optimizer_s) / it
    return out
