"""Bootstrap intervals: the central 95% of resampled values."""

from __future__ import annotations


def interval95(values: list[float]) -> tuple[float, float]:
    """The central 95% of ``values``: 2.5% of them off each end (as many off one end as off the other)."""
    vs = sorted(values)
    cut = int(0.025 * len(vs))
    return vs[cut], vs[len(vs) - 1 - cut]
