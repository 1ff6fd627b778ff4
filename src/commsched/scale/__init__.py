"""Scaling sweeps (pure): predicted iteration time, scaling factor and speedup over worker counts."""

from commsched.scale.markers import MARKER_COLUMNS, Marker, bend_index, find_markers, mark_rows, overtake_index
from commsched.scale.sweep import expand_workers, sweep

__all__ = ["MARKER_COLUMNS", "Marker", "bend_index", "expand_workers", "find_markers", "mark_rows", "overtake_index", "sweep"]
