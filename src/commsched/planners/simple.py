"""The two extremes of MG-WFBP Section 2: WFBP (Sec. 2.3) and single-layer SyncEASGD (Sec. 2.4)."""

from __future__ import annotations

from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.types import ModelProfile


@dataclass(frozen=True)
class WFBP:
    """Wait-free backpropagation: one all-reduce per tensor, started as soon as it is ready (Eq. 6-8)."""

    name: str = "wfbp"

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        return tuple(range(1, len(profile.tensors) + 1))


@dataclass(frozen=True)
class SyncEASGD:
    """Single-layer communication (You et al.): one all-reduce of every gradient after backward (Eq. 9)."""

    name: str = "synceasgd"

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        return (len(profile.tensors),)
