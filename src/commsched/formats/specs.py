"""Inputs as a command line names them: a cluster (a preset's name or a cluster file), a runtime's
execution semantics (``nccl``, ``gloo`` or a file that holds semantics) and a set of profiles
(profile files and zoo models), read into the library's types."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from commsched.errors import CommschedError

if TYPE_CHECKING:
    from commsched.cost.cluster import ClusterSpec
    from commsched.sim.semantics import Semantics
    from commsched.types import ModelProfile


def cluster_from_spec(spec: str, algorithm: str | None = None) -> ClusterSpec:
    """The cluster ``spec`` names: a preset (:data:`commsched.cost.cluster.PRESETS`), else a
    ``commsched.cluster/v1`` file (a name ending ``.json`` or an existing file), else an unknown
    preset (an error that lists them); with its all-reduce ``algorithm`` when given."""
    from commsched.cost.cluster import PRESETS, preset
    from commsched.formats.io import load_cluster

    c = PRESETS[spec] if spec in PRESETS else load_cluster(spec) if (spec.endswith(".json") or Path(spec).is_file()) else preset(spec)
    return c.with_algorithm(algorithm) if algorithm else c


def semantics_from_spec(spec: str) -> Semantics:
    """The runtime's execution semantics ``spec`` names: ``nccl`` or ``gloo`` (the stock ones), or a
    JSON file: a ``validate.json`` (the semantics its rounds measured), a document with a
    ``semantics`` object (``validate`` writes ``semantics.json``), or a semantics document itself."""
    from commsched.formats.io import read_json
    from commsched.sim.semantics import GLOO, NCCL, semantics_from_json

    if spec in ("nccl", "gloo"):
        return NCCL if spec == "nccl" else GLOO
    if spec.endswith(".json") or Path(spec).is_file():
        from commsched.calibrate.report import is_validate_report, load_validate_report

        doc = read_json(spec)
        if is_validate_report(doc):
            doc = load_validate_report(spec)["semantics"]  # the semantics a validate run measured in its rounds
        elif isinstance(doc, dict) and isinstance(doc.get("semantics"), dict):
            doc = doc["semantics"]
        try:
            return semantics_from_json(doc, where=spec)
        except CommschedError as e:
            raise CommschedError(str(e) if str(e).startswith(spec) else f"{spec}: {e}") from None
    raise CommschedError(f"--runtime must be nccl, gloo or a semantics JSON file, got {spec!r}")


def profiles_from(
    paths: Sequence[str], models: Sequence[str], zoo: Callable[[str], ModelProfile]
) -> dict[str, ModelProfile]:
    """Profiles by name: each file of ``paths`` (named by its model, or ``model (path)`` when that
    name is taken), then ``zoo(m)`` for each zoo model of ``models`` (``m``, or ``m (zoo)`` when
    taken). Every file is read before the first zoo profile is made."""
    from commsched.formats.io import load_profile

    out: dict[str, ModelProfile] = {}
    for path in paths:
        p = load_profile(path)
        out[p.model if p.model not in out else f"{p.model} ({path})"] = p
    for m in models:
        out[m if m not in out else f"{m} (zoo)"] = zoo(m)
    return out


__all__ = ["cluster_from_spec", "profiles_from", "semantics_from_spec"]
