"""All-reduce cost models (pure): alpha-beta, per-algorithm, piecewise, tabulated; fitting; presets."""

from commsched.cost.cluster import PRESETS, ClusterSpec, cluster_from_json, preset
from commsched.cost.fit import FitReport, fit_alpha_beta, fit_piecewise
from commsched.cost.models import (
    ALGORITHMS,
    AlgorithmCost,
    AlphaBeta,
    CostModel,
    LinkParams,
    Piecewise,
    Table,
    algorithm_alpha_beta,
    osf_ring_cost,
)

__all__ = [
    "ALGORITHMS",
    "PRESETS",
    "AlgorithmCost",
    "AlphaBeta",
    "ClusterSpec",
    "CostModel",
    "FitReport",
    "LinkParams",
    "Piecewise",
    "Table",
    "algorithm_alpha_beta",
    "cluster_from_json",
    "fit_alpha_beta",
    "fit_piecewise",
    "osf_ring_cost",
    "preset",
]
