"""LIBRA's dynamic programme (LIBRA Section IV, Algorithm 1): thread allocation for a fixed tensor
fusion (Eq. 16-19) and co-optimised with fusion into at most K groups (Eq. 21-23).

The backward computation (W seconds alone) is cut into Z chunks of w = W / Z, and all-reduces may
start only at chunk edges. T(i, z) is the least time at which stage i ends (the all-reduce of group
i + 1 starts) with z chunks computed; stage i runs group i's all-reduce with config R beside the
compute of chunks z'..z and costs h(c_i, zw, z'w, R) (Eq. 18-19), in LIBRA's stage model (Eq. 8-11):
with T_o = p(c, r) + a the all-reduce overlapped, T_a = q(c, r) + a alone, g(b, r) = b x f(R) the
compute overlapped (f = ``compute_factor``), and D = (z - z') w,

- the all-reduce ends first (T_o <= D f): h = T_o + (D - T_o / f) = D + T_o (1 - 1 / f);
- otherwise it must be the last stage (z = Z; Eq. 19's infinity excludes it before): compute ends at
  D f and the all-reduce's rest takes T_a (1 - D f / T_o): h = D f + T_a (1 - D f / T_o).

So for z < Z, T(i, z) = z w + min over (R, z') of [T(i-1, z') - z' w] + T_o (1 - 1/f) with
z' <= z - ceil(T_o / (f w)): a running minimum over z' per (group, config), which makes the
programme O(K Z J) for a fixed fusion and O(K L^2 Z J) co-optimised (LIBRA: O(K Z^2 J) and
O(K L^2 Z^2 J)). The group of tensors l'..l may start only once its gradients are ready: z' w >=
n(l), the work through its last tensor (Algorithm 1's GetMinChunkID).

The result is a plan (groups and configs); :func:`commsched.planners.base.plan_and_timeline` scores
it with the simulator, which lets each all-reduce start as soon as it can rather than at a chunk
edge (LIBRA's T-hat). Theorem 1 (Eq. 20) bounds T-hat(K, Z) <= (1 + (K-1)/Z) T* for a fixed fusion
of K groups under LIBRA's Assumptions 1-3; ``tests/property/test_libra.py`` checks it against brute
force and BENCHMARKS.md reports it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commsched.cost.resource_models import ClusterResources
from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.planners.base import resource_planner
from commsched.planners.stock_ddp import DDP
from commsched.types import ModelProfile


def _stage_terms(cost: CostModel, resources: ClusterResources, nbytes: np.ndarray):
    """Per config (rows) and group size (columns): T_o, T_a and f. T_o and T_a are those of the
    config NCCL runs at each size (on stock NCCL fewer channels for small groups,
    :meth:`~commsched.cost.resource_models.ClusterResources.effective`, as the simulator has them); f
    stays LIBRA's f(R) of the config asked, one per config as the programme needs it."""
    model, configs = resources.contention, resources.allowed
    t_o = np.array([np.atleast_1d(resources.allreduce_s(cost, nbytes, c, True)) for c in configs], dtype=np.float64)
    t_a = np.array([np.atleast_1d(resources.allreduce_s(cost, nbytes, c, False)) for c in configs], dtype=np.float64)
    f = np.array([model.compute_factor(c) for c in configs], dtype=np.float64)[:, None]
    return t_o, t_a, f


def _min_chunk(work_prefix: np.ndarray, w: float, z_max: int) -> np.ndarray:
    """Algorithm 1's GetMinChunkID for each prefix: the least z >= 1 with z w >= work through it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.ceil(work_prefix / w - 1e-9) if w > 0 else np.zeros_like(work_prefix)
    return np.clip(z, 1, z_max).astype(np.int64)


def _stage_last(prev: np.ndarray, w: float, z_big: int, t_o, t_a, f) -> tuple[np.ndarray, np.ndarray]:
    """min over z' of prev[.., z'] + h(z = Z, z'): prev (..., Z+1); t_o, t_a, f broadcast to (..., 1).
    Returns the values and the argmin z'."""
    d = (z_big - np.arange(z_big + 1)) * w  # D for every z'
    first = t_o <= d * f
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(first, d + t_o * (1 - 1 / f), d * f + t_a * (1 - np.where(t_o > 0, d * f / t_o, 1.0)))
    tot = prev + h
    zi = np.argmin(tot, axis=-1)
    return np.take_along_axis(tot, zi[..., None], axis=-1)[..., 0], zi


def _stage_inner(prev: np.ndarray, z_lo: int, w: float, z_big: int, t_o, f) -> tuple[np.ndarray, np.ndarray]:
    """For z < Z: min over z' in [z_lo, z - d] of prev[.., z'] - z' w, plus z w + T_o (1 - 1/f).
    prev (..., Z+1) without the config axis; t_o, f (J, ...). Returns values (J, ..., Z) for
    z = 0..Z-1 and the argmin z'. The running minimum does not depend on the config: made once."""
    u = prev - np.arange(z_big + 1) * w
    u[..., :z_lo] = np.inf
    run = np.minimum.accumulate(u, axis=-1)  # running minimum and where it was reached
    arg = np.maximum.accumulate(np.where(u == run, np.arange(z_big + 1), -1), axis=-1)
    d = np.ceil(np.where(w > 0, t_o / (f * w), 0.0) - 1e-9).astype(np.int64)
    d = np.where(t_o > 0, np.maximum(d, 1), 0)  # an all-reduce takes time: at least one chunk
    # only z >= z_lo can be reached (the group's gradients are ready at z_lo at the earliest)
    zs = np.arange(z_lo, z_big)
    src = zs - d[..., None]  # (J, ..., Z - z_lo)
    ok = src >= z_lo
    srcc = np.clip(src, 0, z_big)
    shape = src.shape[:-1] + (z_big + 1,)
    val = np.full(src.shape[:-1] + (z_big,), np.inf)
    at = np.full(src.shape[:-1] + (z_big,), -1, dtype=np.int64)
    val[..., z_lo:] = np.where(ok, np.take_along_axis(np.broadcast_to(run, shape), srcc, axis=-1), np.inf) + zs * w
    at[..., z_lo:] = np.where(ok, np.take_along_axis(np.broadcast_to(arg, shape), srcc, axis=-1), -1)
    return val + (t_o * (1 - 1 / f))[..., None], at


def libra_fixed(profile: ModelProfile, ends: Sequence[int], cost: CostModel, resources: ClusterResources, z_chunks: int = 150):
    """Eq. 16-19: a config per group for the fusion ``ends``; returns (configs, the programme's T(K, Z))."""
    _check_z(z_chunks)
    work = np.concatenate(([0.0], np.cumsum([t.backward_s for t in profile.tensors])))
    prefix = np.concatenate(([0], np.cumsum([t.bytes for t in profile.tensors])))
    w = float(work[-1]) / z_chunks
    zb = z_chunks
    starts = [0, *ends[:-1]]
    sizes = np.array([prefix[e] - prefix[s] for s, e in zip(starts, ends)], dtype=np.float64)
    t_o, t_a, f = _stage_terms(cost, resources, sizes)  # (J, K)
    if w <= 0:  # no backward compute: every all-reduce runs alone, each at its fastest config
        best = np.argmin(t_a, axis=0)
        return tuple(resources.allowed[int(j)] for j in best), float(t_a.min(axis=0).sum())
    zmin = _min_chunk(work[np.asarray(ends)], w, zb)
    k = len(ends)
    tab = np.full((k + 1, zb + 1), np.inf)
    tab[0] = np.arange(zb + 1) * w  # stage 0: compute only
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for i in range(k):
        inner, at_inner = _stage_inner(tab[i].copy(), int(zmin[i]), w, zb, t_o[:, i], f[:, 0])
        prev = tab[i].copy()
        prev[: int(zmin[i])] = np.inf
        last, at_last = _stage_last(prev[None, :], w, zb, t_o[:, i : i + 1], t_a[:, i : i + 1], f)
        vals = np.concatenate((inner, last[:, None]), axis=1)  # (J, Z+1)
        ats = np.concatenate((at_inner, at_last[:, None]), axis=1)
        j_best = np.argmin(vals, axis=0)
        tab[i + 1] = vals[j_best, np.arange(zb + 1)]
        back.append((j_best, ats[j_best, np.arange(zb + 1)]))
    if not math.isfinite(tab[k, zb]):
        raise CommschedError("LIBRA's programme found no schedule (every stage infeasible); raise Z")
    configs, z = [], zb
    for i in range(k - 1, -1, -1):
        j_best, ats = back[i]
        configs.append(resources.allowed[int(j_best[z])])
        z = int(ats[z])
    return tuple(reversed(configs)), float(tab[k, zb])


def libra_joint(
    profile: ModelProfile, cost: CostModel, resources: ClusterResources, max_groups: int = 10, z_chunks: int = 150, prune: bool = True
):
    """Eq. 21-23: tensor fusion into at most ``max_groups`` groups and a config for each; returns
    (ends, configs, the programme's least T(i, L, Z) over i <= K). ``prune`` drops configs that
    another beats in every stage cost (:func:`_undominated`; the value is the same without it)."""
    _check_z(z_chunks)
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise CommschedError(f"LIBRA's K (most groups) must be a whole number >= 1, got {max_groups!r}")
    n = len(profile.tensors)
    work = np.concatenate(([0.0], np.cumsum([t.backward_s for t in profile.tensors])))
    prefix = np.concatenate(([0], np.cumsum([t.bytes for t in profile.tensors]))).astype(np.float64)
    zb = z_chunks
    w = float(work[-1]) / zb
    zmin = _min_chunk(work, w, zb)  # per l (tensors 0..l-1 ready)
    jn = len(resources.allowed)
    kk = min(max_groups, n)
    tab = np.full((kk + 1, n + 1, zb + 1), np.inf)
    tab[0, 0] = np.arange(zb + 1) * w
    back = np.zeros((kk + 1, n + 1, zb + 1, 3), dtype=np.int64)  # (l', z', j)
    f = np.array([resources.contention.compute_factor(c) for c in resources.allowed], dtype=np.float64)
    # T_o and T_a of every group l'..l-1 at every config, once: (J, n+1, n+1)
    pair = prefix[None, :] - prefix[:, None]  # [l', l]
    valid = pair > 0
    t_o_all, t_a_all, _ = _stage_terms(cost, resources, np.where(valid, pair, 1.0).ravel())
    t_o_all = t_o_all.reshape(jn, n + 1, n + 1)
    t_a_all = t_a_all.reshape(jn, n + 1, n + 1)
    keep = _undominated(t_o_all[:, valid], t_a_all[:, valid], f) if prune else np.ones(jn, dtype=bool)
    # LIBRA's groups are runs of layers: a group may end only where backward compute follows (or at
    # the end); tensors that become ready at the same moment as the one before them (a layer's
    # bias, estimated normalisation layers) stay with it
    ends_ok = np.array([l for l in range(1, n + 1) if l == n or profile.tensors[l].backward_s > 0])
    if w <= 0:  # no backward compute: groups run alone, one after another, each at its fastest config
        return _no_compute_joint(t_a_all, kk, n, resources)
    starts_ok = np.concatenate(([0], ends_ok))
    js = np.flatnonzero(keep)
    for i in range(1, kk + 1):
        for l in ends_ok:
            lp = starts_ok[starts_ok < l]
            lp = lp[np.isfinite(tab[i - 1, lp]).any(axis=1)]
            if lp.size == 0:
                continue
            t_o, t_a = t_o_all[np.ix_(js, lp, [l])][..., 0], t_a_all[np.ix_(js, lp, [l])][..., 0]  # (J', L')
            prev = tab[i - 1, lp]  # (L', Z+1)
            fj = f[js]
            inner, at_inner = _stage_inner(prev.copy(), int(zmin[l]), w, zb, t_o, np.broadcast_to(fj[:, None], t_o.shape))
            pl = prev.copy()
            pl[..., : int(zmin[l])] = np.inf
            pl = pl[None]
            last, at_last = _stage_last(pl, w, zb, t_o[..., None], t_a[..., None], fj[:, None, None])
            vals = np.concatenate((inner, last[..., None]), axis=-1)  # (J, L', Z+1)
            ats = np.concatenate((at_inner, at_last[..., None]), axis=-1)
            flat = vals.reshape(-1, zb + 1)
            best = np.argmin(flat, axis=0)
            tab[i, l] = flat[best, np.arange(zb + 1)]
            jb, lb = np.unravel_index(best, (js.size, lp.size))
            back[i, l, :, 0] = lp[lb]
            back[i, l, :, 1] = ats[jb, lb, np.arange(zb + 1)]
            back[i, l, :, 2] = js[jb]
    finals = tab[1:, n, zb]
    if not np.isfinite(finals).any():
        raise CommschedError("LIBRA's programme found no schedule (every stage infeasible); raise Z")
    i = int(np.argmin(finals)) + 1
    value = float(tab[i, n, zb])
    ends, configs, l, z = [], [], n, zb
    while i > 0:
        lp, zp, j = (int(v) for v in back[i, l, z])
        ends.append(l)
        configs.append(resources.allowed[j])
        l, z, i = lp, zp, i - 1
    return tuple(reversed(ends)), tuple(reversed(configs)), value


def _undominated(t_o: np.ndarray, t_a: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Configs (rows; columns are group sizes) that no other config beats in every stage cost of
    the programme: R' makes R useless when, at every size, T_a' <= T_a, T_o' <= T_o, f' <= f and
    T_o'/f' <= T_o/f. Then pen = T_o (1 - 1/f), d = ceil(T_o / (f w)) and the last stage's h (each
    increasing in T_a, T_o and f, continuous where its branches meet) are no larger for R'. Among
    configs equal in all four, the first is kept."""
    j = t_o.shape[0]
    keep = np.ones(j, dtype=bool)
    ratio = t_o / f[:, None]
    for a in range(j):
        for b in range(j):
            if a == b or not keep[b]:
                continue
            le = (t_a[b] <= t_a[a]).all() and (t_o[b] <= t_o[a]).all() and f[b] <= f[a] and (ratio[b] <= ratio[a]).all()
            if le:
                eq = (t_a[b] == t_a[a]).all() and (t_o[b] == t_o[a]).all() and f[b] == f[a]
                if not eq or b < a:
                    keep[a] = False
                    break
    return keep


def _no_compute_joint(t_a_all: np.ndarray, kk: int, n: int, resources: ClusterResources):
    """The co-optimised programme when there is no compute to overlap: least sum of all-reduce
    times over fusions into at most ``kk`` groups (each group at its fastest config)."""
    fast = t_a_all.min(axis=0)  # [l', l]
    which = t_a_all.argmin(axis=0)
    tab = np.full((kk + 1, n + 1), np.inf)
    tab[0, 0] = 0.0
    back = np.zeros((kk + 1, n + 1), dtype=np.int64)
    for i in range(1, kk + 1):
        for l in range(i, n + 1):
            cand = tab[i - 1, :l] + fast[:l, l]
            back[i, l] = int(np.argmin(cand))
            tab[i, l] = cand[back[i, l]]
    i = int(np.argmin(tab[1:, n])) + 1
    value, ends, configs, l = float(tab[i, n]), [], [], n
    while i > 0:
        lp = int(back[i, l])
        ends.append(l)
        configs.append(resources.allowed[int(which[lp, l])])
        l, i = lp, i - 1
    return tuple(reversed(ends)), tuple(reversed(configs)), value


def _check_z(z: object) -> None:
    if isinstance(z, bool) or not isinstance(z, int) or not 1 <= z <= 100_000:
        raise CommschedError(f"LIBRA's Z (compute chunks) must be a whole number in [1, 100000], got {z!r}")


@resource_planner
@dataclass(frozen=True)
class Libra:
    """LIBRA (Algorithm 2, line 4): ``fusion`` "joint" co-optimises fusion into at most
    ``max_groups`` groups with a config per group (Eq. 21-23); "ddp" keeps DDP's default buckets and
    allocates configs only (Eq. 16-19). K = 10 and Z = 150 as in LIBRA's evaluation."""

    max_groups: int = 10
    z_chunks: int = 150
    fusion: str = "joint"
    name: str = "libra"

    def __post_init__(self) -> None:
        if self.fusion not in ("joint", "ddp"):
            raise CommschedError(f"libra fusion must be 'joint' or 'ddp', got {self.fusion!r}")
        _check_z(self.z_chunks)

    def assign(self, profile: ModelProfile, cost: CostModel, resources: ClusterResources):
        if self.fusion == "ddp":
            ends = DDP().ends(profile, cost)
            configs, _ = libra_fixed(profile, ends, cost, resources, self.z_chunks)
            return ends, configs
        ends, configs, _ = libra_joint(profile, cost, resources, self.max_groups, self.z_chunks)
        return ends, configs


__all__ = ["Libra", "libra_fixed", "libra_joint"]
