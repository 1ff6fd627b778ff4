"""Scaling sweeps (pure): predicted iteration time, scaling factor and speedup over worker counts."""

from commsched.scale.sweep import expand_workers, sweep

__all__ = ["expand_workers", "sweep"]
