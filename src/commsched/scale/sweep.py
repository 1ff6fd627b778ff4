"""Sweeps over worker counts, strategies and all-reduce algorithms.

With a fixed per-worker batch, one worker's iteration is its compute alone (no communication), so
the scaling factor of OSF Eq. 1 is SF(N) = T_1 / (N T_N) = iteration_1 / iteration_N for the same
job, and the speedup over one worker is N x SF(N) (MG-WFBP Eq. 4 with overlap).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from commsched.cost.cluster import ClusterSpec
from commsched.errors import CommschedError
from commsched.planners.base import Planner
from commsched.sim.timeline import iteration_end_s, prefix_bytes
from commsched.types import MAX_WORKERS, ModelProfile, shown


def expand_workers(spec: str, what: str = "worker count") -> tuple[int, ...]:
    """Parse "4,8,16" or a geometric "4,8,...,2048" (every count typed, then the series of the two
    before "...", by their ratio); ``what`` names the counts in errors (node counts for ``scale --nodes``)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise CommschedError(f"{what}s must be a comma-separated list, got {shown(spec)}")
    out: list[int] = []
    for i, p in enumerate(parts):
        if p in ("...", "…"):
            if len(out) < 2 or i != len(parts) - 2:
                raise CommschedError(f"'...' needs two counts before it and one after, as in 4,8,...,2048; got {shown(spec)}")
            continue
        if not re.fullmatch(r"[0-9]+", p) or not p.strip("0"):
            raise CommschedError(f"{what} must be a positive integer, got {shown(p)} in {shown(spec)}")
        # by its digits first: int() refuses strings of over 4300 digits with its own ValueError
        if len(p.lstrip("0")) > len(str(MAX_WORKERS)) or int(p) > MAX_WORKERS:
            raise CommschedError(f"{what} must be at most 2**20 (1,048,576), got {shown(p)}")
        out.append(int(p))
    if "..." in parts or "…" in parts:
        # every count typed is kept; '...' continues the series of the two just before it
        typed, last = out[:-1], out[-1]
        if any(b <= a for a, b in zip(typed, typed[1:])):
            raise CommschedError(f"{what}s must increase, got {shown(typed)} before '...'")
        a, b = typed[-2], typed[-1]
        if b % a:
            raise CommschedError(f"'...' continues a geometric series with a whole ratio; {a},{b} is not one")
        if last < b:
            raise CommschedError(f"the last count after '...' must be at least {b}, got {last} in {shown(spec)}")
        seq = typed
        while seq[-1] * (b // a) <= last:
            seq.append(seq[-1] * (b // a))
        if seq[-1] != last:
            raise CommschedError(f"{last} is not in the series {a},{b},...; the last term would be {seq[-1]}")
        out = seq
    if any(b <= a for a, b in zip(out, out[1:])):
        raise CommschedError(f"{what}s must increase, got {shown(out)}")
    return tuple(out)


def sweep(
    profiles: dict[str, ModelProfile],
    cluster: ClusterSpec,
    workers: Sequence[int],
    planners: Sequence[Planner],
    algorithms: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict]:
    """One row per (model, algorithm, strategy, workers). ``algorithms`` None keeps the cluster's model.

    On a hierarchical cluster (``cluster.gpus_per_node`` set) worker counts are whole nodes and each
    row also has ``nodes``. :func:`commsched.scale.markers.mark_rows` adds the bend/overtake/collapse
    columns."""
    rows: list[dict] = []
    algos: Iterable[str | None] = algorithms or [None]
    for model, profile in profiles.items():
        ready, pb = profile.ready_s, prefix_bytes(profile)
        t1 = profile.compute_s + profile.optimizer_s
        for algo in algos:
            base = cluster if algo is None else cluster.with_algorithm(algo)
            # a hierarchical cluster's model is "hierarchical" whatever its algorithm: name the algorithm
            algo_name = getattr(base.allreduce, "algorithm", None) or base.allreduce.to_json()["model"]
            per_node = base.gpus_per_node
            for n in workers:
                cost = base.with_workers(n).allreduce
                for planner in planners:
                    ends = planner.ends(profile, cost)
                    t_n = iteration_end_s(ready, pb, ends, cost) + profile.optimizer_s
                    sf = t1 / t_n
                    rows.append(
                        {
                            "model": model,
                            "algorithm": algo_name,
                            "strategy": planner.name,
                            "workers": n,
                            **({"nodes": n // per_node} if per_node else {}),
                            "iteration_s": t_n,
                            "compute_s": profile.compute_s,
                            "non_overlapped_comm_s": max(0.0, t_n - profile.optimizer_s - profile.compute_s),
                            "buckets": len(ends),
                            "scaling_factor": sf,
                            "speedup": n * sf,
                        }
                    )
                if progress:
                    progress(len(planners))
    return rows
