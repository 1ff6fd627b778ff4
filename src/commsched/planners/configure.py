"""Named strategies with their knobs set: DDP's bucket cap, Horovod's fusion threshold and cycle."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from commsched.planners import DDP, RESOURCE_STRATEGIES, STRATEGIES, Horovod, Planner, planner
from commsched.planners.stock_ddp import MIB, ddp_with_cap


def configured_planners(
    names: Sequence[str] = (),
    *,
    bucket_mb: float | None = None,
    horovod_threshold_mb: float | None = None,
    horovod_cycle_ms: float | None = None,
    resources: bool = False,
) -> list[Planner]:
    """The planners of ``names`` (default: every strategy, and with ``resources`` those that choose
    per-bucket resources too). ``bucket_mb`` caps every DDP bucket, the first included
    (:func:`~commsched.planners.stock_ddp.ddp_with_cap`); ``horovod_threshold_mb`` and
    ``horovod_cycle_ms`` set the Horovod strategies' fusion threshold (MiB) and cycle (ms). None
    keeps a strategy's own value."""
    chosen = [planner(n) for n in (names or [*STRATEGIES, *(RESOURCE_STRATEGIES if resources else ())])]
    out: list[Planner] = []
    for p in chosen:
        if isinstance(p, DDP) and bucket_mb is not None:
            p = replace(ddp_with_cap(bucket_mb), name=p.name)
        if isinstance(p, Horovod):
            if horovod_threshold_mb is not None:
                p = replace(p, threshold_bytes=int(horovod_threshold_mb * MIB))
            if horovod_cycle_ms is not None:
                p = replace(p, cycle_s=horovod_cycle_ms / 1e3)
        out.append(p)
    return out


__all__ = ["configured_planners"]
