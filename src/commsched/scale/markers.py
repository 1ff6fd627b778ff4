"""Where a scaling sweep's curves change: each strategy's bend, synceasgd overtaking wfbp, optimal's
collapse to one bucket. Pure functions over the rows of :func:`commsched.scale.sweep`.

Definitions (per model and all-reduce algorithm, worker counts in increasing order):

- **bend** of a strategy: the first worker count N whose scaling factor SF(N) = T_1 / (N T_N) falls
  below ``drop`` (default 0.9) times the best scaling factor at any smaller count in the sweep, i.e.
  where the curve first leaves its plateau by more than 10%. A curve that declines gently (less than
  10% below its best so far at every point) has no bend; a curve that drops 10% at its second point
  bends there. Multiplying every SF by a constant does not move the bend.
- **synceasgd overtakes wfbp**: the first worker count at which synceasgd's iteration time is below
  wfbp's by more than a relative 1e-9 (the tolerance ``plan`` uses for ties). At one worker both are
  the compute alone, so they tie; as the per-all-reduce startup grows with N, wfbp's one all-reduce
  per tensor falls behind synceasgd's single all-reduce (MG-WFBP Sec. 2.3-2.4).
- **optimal collapses to one bucket**: the first worker count at which the optimal plan has exactly
  one bucket (the startup has grown so large that nothing is worth overlapping).

Each marker is reported once, at its first worker count; later counts may leave the condition again
(which the rows show).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from commsched.errors import CommschedError

BEND_DROP = 0.9
TIE_RELATIVE = 1e-9
MARKER_COLUMNS = ("bend", "synceasgd_overtakes_wfbp", "optimal_one_bucket")


@dataclass(frozen=True)
class Marker:
    """One marked point: ``kind`` in MARKER_COLUMNS, on ``strategy``'s curve at ``workers``."""

    model: str
    algorithm: str
    strategy: str
    kind: str
    workers: int
    nodes: int | None = None  # on a hierarchical cluster

    def describe(self) -> str:
        what = {
            "bend": f"{self.strategy} bends",
            "synceasgd_overtakes_wfbp": "synceasgd overtakes wfbp",
            "optimal_one_bucket": "optimal collapses to one bucket",
        }[self.kind]
        where = f"{self.workers} workers" + ("" if self.nodes is None else f" ({self.nodes} nodes)")
        return f"{self.model} ({self.algorithm}): {what} at {where}"


def bend_index(scaling_factors: Sequence[float], drop: float = BEND_DROP) -> int | None:
    """Index of the first SF below ``drop`` x the maximum of the SFs before it, or None."""
    if not 0 < drop < 1:
        raise CommschedError(f"the bend's drop must be in (0, 1), got {drop!r}")
    best = None
    for i, sf in enumerate(scaling_factors):
        if best is not None and sf < drop * best:
            return i
        best = sf if best is None else max(best, sf)
    return None


def overtake_index(challenger_s: Sequence[float], incumbent_s: Sequence[float], rel: float = TIE_RELATIVE) -> int | None:
    """Index of the first point where ``challenger_s`` < ``incumbent_s`` by more than a relative ``rel``."""
    if len(challenger_s) != len(incumbent_s):
        raise CommschedError(f"cannot compare curves of {len(challenger_s)} and {len(incumbent_s)} points")
    for i, (c, w) in enumerate(zip(challenger_s, incumbent_s)):
        if c < w * (1 - rel):
            return i
    return None


def find_markers(rows: Sequence[Mapping], drop: float = BEND_DROP) -> list[Marker]:
    """Every marker of a sweep's rows (keys model, algorithm, strategy, workers, scaling_factor,
    iteration_s, buckets), in the rows' order of (model, algorithm) and strategy."""
    curves: dict[tuple[str, str], dict[str, dict[int, Mapping]]] = {}
    for r in rows:
        curves.setdefault((r["model"], r["algorithm"]), {}).setdefault(r["strategy"], {})[r["workers"]] = r
    out: list[Marker] = []
    for (model, algo), by_strategy in curves.items():
        for strategy, pts in by_strategy.items():
            ws = sorted(pts)
            i = bend_index([pts[w]["scaling_factor"] for w in ws], drop)
            if i is not None:
                out.append(Marker(model, algo, strategy, "bend", ws[i], pts[ws[i]].get("nodes")))
        sync, wfbp = by_strategy.get("synceasgd"), by_strategy.get("wfbp")
        if sync and wfbp:
            ws = sorted(set(sync) & set(wfbp))
            i = overtake_index([sync[w]["iteration_s"] for w in ws], [wfbp[w]["iteration_s"] for w in ws])
            if i is not None:
                out.append(Marker(model, algo, "synceasgd", "synceasgd_overtakes_wfbp", ws[i], sync[ws[i]].get("nodes")))
        opt = by_strategy.get("optimal")
        if opt:
            first = next((w for w in sorted(opt) if opt[w]["buckets"] == 1), None)
            if first is not None:
                out.append(Marker(model, algo, "optimal", "optimal_one_bucket", first, opt[first].get("nodes")))
    return out


def mark_rows(rows: Sequence[Mapping], drop: float = BEND_DROP) -> tuple[list[dict], list[Marker]]:
    """The rows with a 0/1 column per marker kind (1 on the marked strategy's row at its worker
    count), and the markers."""
    markers = find_markers(rows, drop)
    at = {(m.model, m.algorithm, m.strategy, m.workers, m.kind) for m in markers}
    out = []
    for r in rows:
        key = (r["model"], r["algorithm"], r["strategy"], r["workers"])
        out.append({**r, **{k: int((*key, k) in at) for k in MARKER_COLUMNS}})
    return out, markers
