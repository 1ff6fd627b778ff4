"""The closed-form scaling predictors of the OSF paper (Liu et al., WWW'22, Section 2).

Layers are the profile's gradient tensors; the paper's layer n is the first to become ready and
layer 1 the last. With a fixed per-worker batch, the scaling factor of Eq. 1 is
SF = T_1 / (N T_N) = T_comp / T_iter, the single-worker iteration over the N-worker one.

Where these formulas and the simulator differ, and why:

- OSF without fusion (Eq. 3-10) equals the simulator's ``wfbp`` exactly, once Eq. 8 is read with the
  lower summation index j = i (as Eq. 15 has it). Printed with j = i + 1, Eq. 8 would let layer i's
  all-reduce start before its own backward has finished.
- CSF (Eq. 2) equals the simulator's ``synceasgd``: all gradients in one all-reduce after backward.
- OSF under fusion (Eq. 11-16) models an *online* fusion buffer: when the next layer does not fit,
  the scheduler learns it only when that layer is ready, so the buffer waits t_backward of the next
  layer (Eq. 14) before it is sent. The simulator executes a *planned* bucketing, where a bucket
  starts as soon as its last tensor is ready, so for the same buckets OSF_fusion's iteration time is
  never lower than the simulator's, and its scaling factor never higher (tests check a hand-worked
  case where the iteration is longer by exactly that wait).
- Eq. 12-14 are read with one consistent index: after layer i is buffered, it is sent if i = 1, if
  the wait for layer i-1 reaches the timeout, or if layer i-1 does not fit (Eq. 13 prints
  t_backward^(i) where Eq. 12 and 14 use layer i-1). t_update(0) = 0: no all-reduce is issued for an
  empty transfer (Eq. 7 would charge delta for it).
- T_comp is the profile's forward + backward time; for an estimated profile this is 3 T_forward
  (Eq. 4-5) by construction, for a measured one it is what was measured. The paper's model has no
  optimizer step, so ``optimizer_s`` is left out here (the simulator adds it after the last all-reduce).
"""

from __future__ import annotations

import math

from commsched.cost.models import CostModel
from commsched.types import ModelProfile


def _update(cost: CostModel, nbytes: int) -> float:
    return cost.time_s(nbytes) if nbytes > 0 else 0.0


def osf_iteration_s(profile: ModelProfile, cost: CostModel) -> float:
    """T_comp + T_update - T_overlap (denominator of OSF Eq. 3) with Eq. 8-10."""
    tb = [t.backward_s for t in profile.tensors]  # index 0 = paper's layer n
    d = [t.bytes for t in profile.tensors]
    tau = 0.0  # Eq. 8: tau^(n) = 0, measured from the end of layer n's backward
    since_n = 0.0  # sum_{j=i}^{n-1} t_backward^(j)
    for k in range(1, len(d)):
        since_n += tb[k]
        tau = max(tau + cost.time_s(d[k - 1]), since_n)
    t_update = tau + cost.time_s(d[-1])  # Eq. 9
    t_overlap = sum(tb[1:])  # Eq. 10
    return profile.compute_s + t_update - t_overlap


def osf(profile: ModelProfile, cost: CostModel) -> float:
    """OSF Eq. 3: T_comp / (T_comp + T_update - T_overlap)."""
    return profile.compute_s / osf_iteration_s(profile, cost)


def osf_fusion_iteration_s(profile: ModelProfile, cost: CostModel, buffer_bytes: float, timeout_s: float) -> float:
    """T_comp + T_update^fusion - T_overlap (OSF Eq. 11) with Eq. 12-16.

    ``buffer_bytes`` is the fusion buffer size Q and ``timeout_s`` the longest wait for the next
    layer; ``math.inf`` disables either.
    """
    tb = [t.backward_s for t in profile.tensors]
    d = [t.bytes for t in profile.tensors]
    n = len(d)
    tau = 0.0
    since_n = 0.0
    buffered = 0  # B^(i)
    last = 0.0
    for k in range(n):  # k = n - i
        if k > 0:
            since_n += tb[k]
            tau = max(tau + last, since_n)  # Eq. 15 (last = t_wait^(i+1) + t_update(F^(i+1)))
        fits = buffered + d[k] <= buffer_bytes and tb[k] < timeout_s
        buffered = buffered + d[k] if (k > 0 and fits) else d[k]  # Eq. 12
        if k == n - 1:
            last = _update(cost, buffered)  # layer 1 always sends, with no wait
        elif tb[k + 1] >= timeout_s:  # Eq. 13-14: the wait for layer i-1 times out
            last, buffered = timeout_s + _update(cost, buffered), 0
        elif buffered + d[k + 1] > buffer_bytes:  # layer i-1 will not fit: sent once it is ready
            last, buffered = tb[k + 1] + _update(cost, buffered), 0
        else:
            last = 0.0
    t_update = tau + last  # Eq. 16
    return profile.compute_s + t_update - sum(tb[1:])


def osf_fusion(profile: ModelProfile, cost: CostModel, buffer_bytes: float, timeout_s: float = math.inf) -> float:
    """OSF_fusion, Eq. 11."""
    return profile.compute_s / osf_fusion_iteration_s(profile, cost, buffer_bytes, timeout_s)


def csf(profile: ModelProfile, cost: CostModel) -> float:
    """CSF Eq. 2: T_comp / (T_comp + T_comm), all gradients in one all-reduce after backward."""
    return profile.compute_s / (profile.compute_s + cost.time_s(profile.total_bytes))
