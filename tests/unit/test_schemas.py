"""The JSON Schemas in schemas/ describe what the code writes, and reject what the code rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import PRESETS
from commsched.io import plan_to_json, profile_to_json
from commsched.planners import STRATEGIES, make_plan
from tests.conftest import costs, profiles

jsonschema = pytest.importorskip("jsonschema")
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def validator(name: str):
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@given(profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)))
def test_written_profiles_and_plans_validate(profile, cost, name):
    validator("profile.v1.json").validate(profile_to_json(profile))
    validator("plan.v1.json").validate(plan_to_json(make_plan(STRATEGIES[name], profile, cost)))


def test_presets_and_other_models_validate():
    from commsched.cost.cluster import ClusterSpec
    from commsched.cost.models import Piecewise, Table

    v = validator("cluster.v1.json")
    for c in PRESETS.values():
        v.validate(c.to_json())
    v.validate(ClusterSpec("p", 8, Piecewise(1e-6, 1e-5, 1e-9, 1e-4, 45_000)).to_json())
    v.validate(ClusterSpec("t", 8, Table((4, 1024), (1e-5, 2e-5))).to_json())


def test_schema_rejects_bad_values():
    v = validator("profile.v1.json")
    good = json.loads((Path(__file__).resolve().parents[1] / "data" / "tiny-profile.json").read_text())
    v.validate(good)
    bad = json.loads(json.dumps(good))
    bad["tensors"][0]["bytes"] = 0
    assert not v.is_valid(bad)
