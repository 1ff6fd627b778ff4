"""Reading and writing the interchange formats (profile, cluster, plan JSON; schemas in ``schemas/``).

Every reader turns malformed input into a :class:`CommschedError` that names the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path

from commsched.cost.cluster import ClusterSpec, cluster_from_json
from commsched.errors import CommschedError
from commsched.types import Bucket, ModelProfile, Plan, Prediction, TensorSpec, optional_text, shown, too_big_int

PROFILE_SCHEMA = "commsched.profile/v1"
PLAN_SCHEMA = "commsched.plan/v1"


def read_json(path: str | Path) -> object:
    p = Path(path)
    doc = parse_json(read_bytes(p, "a JSON file"), p, "a JSON file")
    _check_unicode(p, doc)
    return doc


def read_bytes(path: str | Path, expected: str) -> bytes:
    """The file's bytes; a missing, unreadable or impossible path is an error that names it and says
    what was ``expected`` there."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise CommschedError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise CommschedError(f"{p}: is a directory, expected {expected}") from None
    except OSError as e:
        raise CommschedError(f"{p}: cannot read ({e.strerror})") from None
    except ValueError as e:  # a path no file can have (an embedded NUL byte)
        raise CommschedError(f"{shown(str(p))}: not a usable path ({e})") from None


def parse_json(raw: bytes, p: Path, expected: str) -> object:
    """``raw`` (UTF-8 JSON read from ``p``) parsed; every way it can be malformed is an error that
    names ``p``."""
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (some Windows editors write one) is not JSON: drop it
    except UnicodeDecodeError as e:
        raise CommschedError(f"{p}: not UTF-8 text (byte {e.start}); expected {expected}") from None
    try:
        # NaN and Infinity tokens (which Python's json accepts) are read as floats and rejected by
        # the field they stand in, so the error names the field
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CommschedError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise CommschedError(f"{p}: JSON nested too deeply") from None
    except ValueError as e:  # an integer literal of more than 4300 digits (int_max_str_digits)
        raise CommschedError(f"{p}: unreadable JSON number: {str(e).splitlines()[0]}") from None


def _check_unicode(p: Path, doc: object) -> None:
    """JSON's \\ud800 escapes can make strings no UTF-8 stream can print (an unpaired surrogate): a
    name made of one would fail the table, the plot or the output file later. Walks iteratively."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise CommschedError(
                    f"{p}: the string {v.encode('utf-8', 'backslashreplace').decode()[:40]!r} holds an unpaired "
                    f"surrogate escape (\\ud800-\\udfff), which is not text"
                ) from None


def dumps(doc: object, what: str = "output", **kwargs) -> str:
    """Strict JSON text: a NaN or an infinity anywhere is a CommschedError, never ``NaN``/``Infinity``
    tokens that strict readers (browsers, jq, Perfetto) reject. Inputs are validated so that nothing
    legitimate is non-finite; this is the last guard."""
    try:
        return json.dumps(doc, allow_nan=False, **kwargs)
    except ValueError as e:
        raise CommschedError(f"{what}: refusing to write a non-finite number ({e})") from None


def write_json(path: str | Path, doc: object) -> Path:
    p = Path(path)
    text = dumps(doc, str(p), indent=2) + "\n"  # before touching the file system
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
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
        raise CommschedError(f"{where}: field {key!r} has the wrong type ({type(v).__name__}: {shown(v)})")
    return v


def _seconds(doc: dict, key: str, where: str) -> float:
    """A number field as float; an integer too large for a float is an error naming the field (the
    dataclass that receives it checks range and finiteness)."""
    v = _field(doc, key, (int, float), where)
    if too_big_int(v):
        raise CommschedError(f"{where}: field {key!r} must be a finite number of seconds, got {shown(v)}")
    return float(v)  # type: ignore[arg-type]


def profile_from_json(doc: object, where: str = "profile") -> ModelProfile:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != PROFILE_SCHEMA:
        raise CommschedError(f"{where}: schema must be {PROFILE_SCHEMA!r}, got {shown(doc.get('schema'))}")
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
                backward_s=_seconds(t, "backward_s", w),
            )
        )
    forward_s = _seconds(doc, "forward_s", where)
    if forward_s == 0:
        # a per-tensor backward_s of 0 is real (gradients that become ready together), a forward
        # pass that takes no time is not: a profile saying so was not measured or estimated
        raise CommschedError(f"{where}: forward_s must be > 0 seconds, got 0")
    try:
        return ModelProfile(
            model=str(_field(doc, "model", str, where)),
            batch_size=_field(doc, "batch_size", int, where),  # type: ignore[arg-type]
            device=optional_text(doc, "device", "", where),
            source=doc.get("source", "measured"),  # type: ignore[arg-type]
            forward_s=forward_s,
            tensors=tuple(tensors),
            optimizer_s=_seconds(doc, "optimizer_s", where) if "optimizer_s" in doc else 0.0,
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


def _params(doc: dict, where: str) -> dict:
    """A plan's ``params``: an object, or nothing (absent or null)."""
    params = doc.get("params")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise CommschedError(f"{where}: params must be an object, got {shown(params)}")
    return params


def plan_from_json(doc: object, where: str = "plan") -> Plan:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != PLAN_SCHEMA:
        raise CommschedError(f"{where}: schema must be {PLAN_SCHEMA!r}, got {shown(doc.get('schema'))}")
    buckets = []
    seen: dict[str, int] = {}  # tensor name -> its bucket: each tensor is all-reduced once
    for i, b in enumerate(_field(doc, "buckets", list, where)):  # type: ignore[arg-type]
        w = f"{where}: buckets[{i}]"
        if not isinstance(b, dict):
            raise CommschedError(f"{w}: expected an object")
        names = _field(b, "tensors", list, w)
        if not all(isinstance(n, str) for n in names):  # type: ignore[union-attr]
            raise CommschedError(f"{w}: tensors must be names (strings)")
        for n in names:  # type: ignore[union-attr]
            if n in seen:
                raise CommschedError(f"{w}: tensor {n!r} is already in buckets[{seen[n]}] (a plan all-reduces each tensor once)")
            seen[n] = i
        buckets.append(Bucket(tuple(names), _field(b, "bytes", int, w), b.get("resources")))  # type: ignore[arg-type]
    pred = doc.get("predicted")
    prediction = None
    if isinstance(pred, dict):
        w = f"{where}: predicted"

        def opt(key: str) -> float:
            return _seconds(pred, key, w) if key in pred else 0.0  # type: ignore[arg-type]

        prediction = Prediction(
            iteration_s=_seconds(pred, "iteration_s", w),  # type: ignore[arg-type]
            compute_s=opt("compute_s"),
            comm_s=opt("comm_s"),
            non_overlapped_comm_s=opt("non_overlapped_comm_s"),
        )
    elif pred is not None:
        raise CommschedError(f"{where}: 'predicted' must be an object or null")
    return Plan(
        strategy=str(_field(doc, "strategy", str, where)),
        model=optional_text(doc, "model", "", where),
        buckets=tuple(buckets),
        predicted=prediction,
        params=_params(doc, where),
    )


def load_plan(path: str | Path) -> Plan:
    return _in_file(path, lambda doc: plan_from_json(doc, where=str(path)))
