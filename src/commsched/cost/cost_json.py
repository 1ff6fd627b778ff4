"""The ``allreduce`` object of a ``commsched.cluster/v1`` document, parsed into a cost model of
:mod:`commsched.cost.models` or :mod:`commsched.cost.hierarchical` (its own module, so that neither
of those imports the other)."""

from __future__ import annotations

from commsched.cost.hierarchical import hierarchical_from_json
from commsched.cost.models import ALGORITHMS, AlgorithmCost, AlphaBeta, CostModel, LinkParams, Piecewise, Table
from commsched.errors import CommschedError
from commsched.types import shown, too_big_int


def cost_model_from_json(obj: object, workers: int) -> CostModel:
    """Parse the ``allreduce`` object of a ``commsched.cluster/v1`` document."""
    if not isinstance(obj, dict):
        raise CommschedError(f"cluster 'allreduce' must be an object, got {type(obj).__name__}")
    kind = obj.get("model")

    def num(key: str) -> float:
        if key not in obj:
            raise CommschedError(f"allreduce model {shown(kind)} needs field {key!r}")
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise CommschedError(f"allreduce field {key!r} must be a number, got {shown(v)}")
        if too_big_int(v):
            raise CommschedError(f"allreduce field {key!r} must be a finite number, got {shown(v)}")
        return float(v)

    if kind == "alpha_beta":
        return AlphaBeta(num("alpha_s"), num("beta_s_per_byte"))
    if kind in ALGORITHMS:
        gamma = num("gamma_s_per_byte") if "gamma_s_per_byte" in obj else 0.0
        return AlgorithmCost(kind, LinkParams(num("link_alpha_s"), num("link_beta_s_per_byte"), gamma), workers)
    if kind == "piecewise":
        th = obj.get("threshold_bytes")
        if isinstance(th, float) and th.is_integer():
            th = int(th)
        return Piecewise(num("a1_s"), num("b1_s"), num("a2_s_per_byte"), num("b2_s"), th)  # type: ignore[arg-type]
    if kind == "table":
        pts = obj.get("points")
        if not isinstance(pts, list) or not all(isinstance(p, list) and len(p) == 2 for p in pts):
            raise CommschedError("table allreduce model needs 'points': [[bytes, seconds], ...]")
        for b, s in pts:
            if isinstance(b, bool) or not isinstance(b, int):
                raise CommschedError(f"table sizes must be whole bytes, got {shown(b)}")
            if isinstance(s, bool) or not isinstance(s, (int, float)) or too_big_int(s):
                raise CommschedError(f"table times must be finite numbers of seconds, got {shown(s)}")
            if s == 0:
                raise CommschedError(f"table point at {shown(b)} bytes has a time of 0 s; a measured all-reduce takes time")
        return Table(tuple(p[0] for p in pts), tuple(float(p[1]) for p in pts))
    if kind == "hierarchical":
        return hierarchical_from_json(obj, workers)
    known = ", ".join(("alpha_beta", *ALGORITHMS, "piecewise", "table", "hierarchical"))
    raise CommschedError(f"unknown allreduce model {shown(kind)}; choose from {known}")
