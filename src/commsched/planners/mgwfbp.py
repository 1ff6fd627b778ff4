"""MG-WFBP, Algorithm 1 of Shi, Chu and Li (MG-WFBP paper, Section 4.2), exactly as printed.

Walking from the first-ready layer (the paper's layer L) down, layer l is made a merged-gradient
layer when tau_b[l-1] + t_b[l-1] - tau_c[l] < a (Eq. 38); merging sets t_c[l] = 0, adds p[l] into
p[l-1] and recomputes t_c[l-1] (Merge, Eq. 12-14), and the communication starts tau_c are
recomputed (Eq. 7). For a linear cost, a is the all-reduce startup, used as printed; for any other
cost model the saving of Eq. 17, T(p[l]) + T(p[l-1]) - T(p[l] + p[l-1]), takes its place (for a
linear cost it equals a, up to rounding).

The printed algorithm recomputes every tau_c after each merge (O(L^2)); a merge at layer l changes
only the starts of layers below l, which the walk visits next, so updating one start per step gives
the same decisions in O(L). A test checks this against a literal O(L^2) transcription.
"""

from __future__ import annotations

from dataclasses import dataclass

from commsched.cost.models import CostModel, as_alpha_beta
from commsched.types import ModelProfile


@dataclass(frozen=True)
class MGWFBP:
    name: str = "mgwfbp"

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        ready = profile.ready_s  # tau_b + t_b of each layer, first-ready first
        n = len(ready)
        p = [t.bytes for t in profile.tensors]
        tc = [cost.time_s(b) for b in p]
        merged = [False] * n
        linear = as_alpha_beta(cost)
        tau_c = ready[0]
        for i in range(n - 1):  # paper: l = L .. 2, with layer l-1 = index i+1
            if linear is not None:
                saving = linear.alpha_s
            else:
                saving = tc[i] + cost.time_s(p[i + 1]) - cost.time_s(p[i] + p[i + 1])
            if ready[i + 1] - tau_c < saving:
                merged[i] = True
                tc[i] = 0.0
                p[i + 1] += p[i]
                tc[i + 1] = cost.time_s(p[i + 1])
            tau_c = max(tau_c + tc[i], ready[i + 1])
        return tuple(i + 1 for i in range(n) if not merged[i])
