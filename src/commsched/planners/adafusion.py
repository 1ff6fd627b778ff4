"""adaFusion, the adaptive tensor fusion of OSF (Liu et al., WWW'22), Section 4.2.

Tensors are taken in ready order into a fusion buffer of B bytes. Tensor i joins the buffer only when
(OSF Eq. 17)

    t_update(B + D_i) + t_wait_i < t_update(B) + t_update(D_i),

otherwise the buffer is sent and tensor i starts a new one. t_wait_i is read as the time the buffer
waits for tensor i: the backward compute between the buffer's last tensor and tensor i (its
``backward_s``, the paper's t_backward^(i)). This departs from the letter of Eq. 14, which defines
t_wait^(i) as layer i's wait for the *next* layer (t_backward^(i-1)); taken literally, the decision
to fuse layer i would hinge on the compute of a layer it is not fused with. t_update is the cluster's cost model; the paper uses its piecewise model (Eq. 18),
which is what a cluster with a ``piecewise`` all-reduce model gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.types import ModelProfile


@dataclass(frozen=True)
class AdaFusion:
    name: str = "adafusion"

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        ends: list[int] = []
        buffer = profile.tensors[0].bytes
        for i in range(1, len(profile.tensors)):
            t = profile.tensors[i]
            if cost.time_s(buffer + t.bytes) + t.backward_s < cost.time_s(buffer) + cost.time_s(t.bytes):
                buffer += t.bytes
            else:
                ends.append(i)
                buffer = t.bytes
        ends.append(len(profile.tensors))
        return tuple(ends)
