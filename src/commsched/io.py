"""Reading and writing the interchange formats (profile, cluster, plan JSON; schemas in ``schemas/``).

Every reader turns malformed input into a :class:`CommschedError` that names the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

from commsched.cost.cluster import ClusterSpec, cluster_from_json
from commsched.errors import CommschedError
from commsched.types import Bucket, ModelProfile, Plan, Prediction, TensorSpec

PROFILE_SCHEMA = "commsched.profile/v1"
PLAN_SCHEMA = "commsched.plan/v1"


def read_json(path: str | Path) -> object:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CommschedError(f"{p}: not UTF-8 text (byte {e.start}); expected a JSON file") from None
    except FileNotFoundError:
        raise CommschedError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise CommschedError(f"{p}: is a directory, expected a JSON file") from None
    except OSError as e:
        raise CommschedError(f"{p}: cannot read ({e.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CommschedError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise CommschedError(f"{p}: JSON nested too deeply") from None


def write_json(path: str | Path, doc: object) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=2) + "\n")
    return p


# --- profile -------------------------------------------------------------------------------------


def profile_to_json(profile: ModelProfile) -> dict:
    doc = {
        "schema": PROFILE_SCHEMA,
        "model": profile.model,
        "batch_size": profile.batch_size,
        "device": profile.device,
        "source": profile.source,
        "forward_s": profile.forward_s,
        "tensors": [{"name": t.name, "bytes": t.bytes, "backward_s": t.backward_s} for t in profile.tensors],
    }
    if profile.optimizer_s:
        doc["optimizer_s"] = profile.optimizer_s
    return doc


def _field(doc: dict, key: str, kind: type | tuple[type, ...], where: str) -> object:
    if key not in doc:
        raise CommschedError(f"{where}: missing field {key!r}")
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, kind):
        raise CommschedError(f"{where}: field {key!r} has the wrong type ({type(v).__name__}: {v!r})")
    return v


def profile_from_json(doc: object, where: str = "profile") -> ModelProfile:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != PROFILE_SCHEMA:
        raise CommschedError(f"{where}: schema must be {PROFILE_SCHEMA!r}, got {doc.get('schema')!r}")
    raw = _field(doc, "tensors", list, where)
    tensors = []
    for i, t in enumerate(raw):  # type: ignore[arg-type]
        w = f"{where}: tensors[{i}]"
        if not isinstance(t, dict):
            raise CommschedError(f"{w}: expected an object")
        tensors.append(
            TensorSpec(
                name=_field(t, "name", str, w),  # type: ignore[arg-type]
                bytes=_field(t, "bytes", int, w),  # type: ignore[arg-type]
                backward_s=float(_field(t, "backward_s", (int, float), w)),  # type: ignore[arg-type]
            )
        )
    forward_s = float(_field(doc, "forward_s", (int, float), where))  # type: ignore[arg-type]
    if forward_s == 0:
        # a per-tensor backward_s of 0 is real (gradients that become ready together), a forward
        # pass that takes no time is not: a profile saying so was not measured or estimated
        raise CommschedError(f"{where}: forward_s must be > 0 seconds, got 0")
    try:
        return ModelProfile(
            model=str(_field(doc, "model", str, where)),
            batch_size=_field(doc, "batch_size", int, where),  # type: ignore[arg-type]
            device=str(doc.get("device", "")),
            source=doc.get("source", "measured"),  # type: ignore[arg-type]
            forward_s=forward_s,
            tensors=tuple(tensors),
            optimizer_s=float(_field(doc, "optimizer_s", (int, float), where)) if "optimizer_s" in doc else 0.0,  # type: ignore[arg-type]
        )
    except CommschedError as e:
        if str(e).startswith(where):
            raise
        raise CommschedError(f"{where}: {e}") from None


def _in_file(path: str | Path, parse):
    """Parse a file's JSON, naming the file in any error exactly once."""
    try:
        return parse(read_json(path))
    except CommschedError as e:
        if str(e).startswith(str(path)):
            raise
        raise CommschedError(f"{path}: {e}") from None


def load_profile(path: str | Path) -> ModelProfile:
    return _in_file(path, lambda doc: profile_from_json(doc, where=str(path)))


# --- cluster -------------------------------------------------------------------------------------


def load_cluster(path: str | Path) -> ClusterSpec:
    return _in_file(path, cluster_from_json)


# --- plan ----------------------------------------------------------------------------------------


def plan_to_json(plan: Plan) -> dict:
    doc: dict = {
        "schema": PLAN_SCHEMA,
        "strategy": plan.strategy,
        "model": plan.model,
        "buckets": [{"tensors": list(b.tensors), "bytes": b.bytes, "resources": b.resources} for b in plan.buckets],
        "predicted": None,
    }
    if plan.predicted is not None:
        p = plan.predicted
        doc["predicted"] = {
            "iteration_s": p.iteration_s,
            "compute_s": p.compute_s,
            "comm_s": p.comm_s,
            "non_overlapped_comm_s": p.non_overlapped_comm_s,
        }
    if plan.params:
        doc["params"] = plan.params
    return doc


def plan_from_json(doc: object, where: str = "plan") -> Plan:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != PLAN_SCHEMA:
        raise CommschedError(f"{where}: schema must be {PLAN_SCHEMA!r}, got {doc.get('schema')!r}")
    buckets = []
    for i, b in enumerate(_field(doc, "buckets", list, where)):  # type: ignore[arg-type]
        w = f"{where}: buckets[{i}]"
        if not isinstance(b, dict):
            raise CommschedError(f"{w}: expected an object")
        names = _field(b, "tensors", list, w)
        if not all(isinstance(n, str) for n in names):  # type: ignore[union-attr]
            raise CommschedError(f"{w}: tensors must be names (strings)")
        buckets.append(Bucket(tuple(names), _field(b, "bytes", int, w), b.get("resources")))  # type: ignore[arg-type]
    pred = doc.get("predicted")
    prediction = None
    if isinstance(pred, dict):
        w = f"{where}: predicted"

        def opt(key: str) -> float:
            return float(_field(pred, key, (int, float), w)) if key in pred else 0.0  # type: ignore[arg-type]

        prediction = Prediction(
            iteration_s=float(_field(pred, "iteration_s", (int, float), w)),  # type: ignore[arg-type]
            compute_s=opt("compute_s"),
            comm_s=opt("comm_s"),
            non_overlapped_comm_s=opt("non_overlapped_comm_s"),
        )
    elif pred is not None:
        raise CommschedError(f"{where}: 'predicted' must be an object or null")
    return Plan(
        strategy=str(_field(doc, "strategy", str, where)),
        model=str(doc.get("model", "")),
        buckets=tuple(buckets),
        predicted=prediction,
        params=doc["params"] if isinstance(doc.get("params"), dict) else {},
    )


def load_plan(path: str | Path) -> Plan:
    return _in_file(path, lambda doc: plan_from_json(doc, where=str(path)))
