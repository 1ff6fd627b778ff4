"""The JSON Schemas in schemas/ describe what the code writes, and reject what the code rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commsched.cost.cluster import PRESETS
from commsched.formats.io import plan_to_json, profile_to_json
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


def test_dataclasses_refuse_numbers_no_input_can_mean():
    from commsched.errors import CommschedError
    from commsched.types import Bucket, ModelProfile, Plan, Prediction, TensorSpec

    t = (TensorSpec("w", 4, 1e-3),)
    for make, needle in [
        (lambda: ModelProfile("m", 1, "d", "measured", 6e5, (TensorSpec("w", 4, 6e5),)), "computes for 1.2e\\+06 s"),
        (lambda: ModelProfile("m", 1, "d", "measured", 5e-324, (TensorSpec("w", 4, 0.0),)), "less than 1e-09 s"),
        (lambda: ModelProfile("m", 1, "d", "measured", 1e-3, tuple(TensorSpec(f"w{i}", 2**50, 0.0) for i in range(2))), "2251799813685248 bytes"),
        (lambda: ModelProfile("m", 2**24 + 1, "d", "measured", 1e-3, t), "batch_size must be at most"),
        (lambda: TensorSpec("w", 4, 10**400), "an integer of about 401 digits"),
        (lambda: Prediction(float("nan"), 0.0, 0.0, 0.0), "predicted iteration_s must be a finite number"),
        (lambda: Plan("s", "m", (Bucket(("w",), 4),), params={"x": [float("inf")]}), "non-finite"),
        (lambda: Bucket(("w",), 4, resources=5), "resources of the bucket from 'w' must be an object or null"),
    ]:
        with pytest.raises(CommschedError, match=needle):
            make()


def test_schemas_carry_the_bounds():
    from commsched.types import MAX_BYTES, MAX_SECONDS, MAX_WORKERS

    prof = validator("profile.v1.json")
    good = json.loads((Path(__file__).resolve().parents[1] / "data" / "tiny-profile.json").read_text())
    for path, value in ((("tensors", 0, "bytes"), MAX_BYTES + 1), (("tensors", 0, "backward_s"), MAX_SECONDS * 2), (("forward_s",), 1e308)):
        bad = json.loads(json.dumps(good))
        obj = bad
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value
        assert not prof.is_valid(bad), path
    cluster = validator("cluster.v1.json")
    doc = {"schema": "commsched.cluster/v1", "workers": MAX_WORKERS + 1, "allreduce": {"model": "alpha_beta", "alpha_s": 1e-3, "beta_s_per_byte": 1e-9}}
    assert not cluster.is_valid(doc)
    assert cluster.is_valid({**doc, "workers": MAX_WORKERS})


@given(profiles(max_tensors=20), costs, st.sampled_from(sorted(STRATEGIES)))
def test_ddp_options_documents_validate_and_round_trip_to_bytes(profile, cost, name):
    from commsched.planners.stock_ddp import MIB, ddp_options_doc

    plan = make_plan(STRATEGIES[name], profile, cost)
    doc = json.loads(json.dumps(ddp_options_doc(plan)))
    validator("ddp_options.v1.json").validate(doc)
    assert [int(c * MIB) for c in doc["kwargs"]["bucket_cap_mb_list"]] == doc["bucket_bytes"] == [b.bytes for b in plan.buckets]


def test_semantics_validate():
    from commsched.sim.semantics import GLOO, NCCL, Semantics

    v = validator("semantics.v1.json")
    fitted = Semantics("gloo", 2, 0.1, 0.4, 0.1, 0.0, 0.5, ((16384, 0.7), (1 << 20, 1.2)), 1e-4, launch_factor_points=((2048, 0.6), (1 << 21, 1.3)))
    for s in (NCCL, GLOO, Semantics("gloo", 2, 0.1, 0.4, 0.1, 1e-3, 0.5, ((16384, 0.7), (1 << 20, 1.2))), Semantics(call_overhead_s=-4e-4), fitted):
        v.validate(s.to_json())
    with pytest.raises(jsonschema.ValidationError):
        v.validate({"backend": "mpi"})
    with pytest.raises(jsonschema.ValidationError):
        v.validate({**fitted.to_json(), "launch_factor_points": [[0, 1.0]]})
    with pytest.raises(jsonschema.ValidationError):  # below the floor the code holds too
        v.validate({**fitted.to_json(), "launch_factor_points": [[16, 0.2]]})
    with pytest.raises(jsonschema.ValidationError):  # the field named before ratios replaced it
        v.validate({**fitted.to_json(), "call_overhead_points": []})


def test_resource_clusters_and_plans_validate():
    from commsched.cost.resource_models import ClusterResources, ConstantContention, LibraContention, LibraRate, ResourceConfig
    from commsched.planners import Joint
    from commsched.profile.zoo_profile import zoo_profile

    c = PRESETS["rs-2xv100s-pcie"]
    validator("cluster.v1.json").validate(c.to_json())
    for model in (ConstantContention(0.5, 0.1), LibraContention(1.0, 1e-4, LibraRate(1e9, 5e8, 0.05), LibraRate(1e9, 5e8, 0.05), 1e-5, 1.0)):
        res = ClusterResources((ResourceConfig(1, 64), ResourceConfig(2, 256)), ResourceConfig(2, 256), model)
        doc = {**c.to_json(), "resources": res.to_json()}
        validator("cluster.v1.json").validate(doc)
    bad = c.to_json()
    bad["resources"]["default"] = {"blocks": 0, "threads_per_block": 64}
    assert not validator("cluster.v1.json").is_valid(bad)
    plan = make_plan(Joint(), zoo_profile("resnet18", 32, "V100S"), c.allreduce, resources=c.resources)
    validator("plan.v1.json").validate(plan_to_json(plan))


def test_stock_nccl_resources_validate_and_bad_ones_do_not():
    from commsched.cost.resource_models import ClusterResources, ConstantContention, ResourceConfig, default_grid
    from commsched.cost.nccl_launch import NcclSetting

    v = validator("cluster.v1.json")
    c = PRESETS["rs-2xv100s-pcie"]
    assert c.to_json()["resources"]["library"] == "modified-nccl"
    res = ClusterResources(default_grid(), ResourceConfig(4, 256), ConstantContention(0.5), "nccl", NcclSetting(4, 256, mechanism="tuner"))
    doc = {**c.to_json(), "resources": res.to_json()}
    v.validate(doc)
    no_default = json.loads(json.dumps(doc))
    del no_default["resources"]["default"]
    v.validate(no_default)  # stock NCCL: the default is NCCL's own, nccl.channels x nccl.nthreads
    legacy = json.loads(json.dumps(doc))
    del legacy["resources"]["library"], legacy["resources"]["nccl"]
    v.validate(legacy)  # files from before the field: configs run as given
    for path, value in (
        (("library",), "gloo"),
        (("nccl", "nthreads"), 100),
        (("nccl", "nthreads"), 1024),
        (("nccl", "channels"), 0),
        (("nccl", "mechanism"), "env"),
        (("nccl", "algorithm"), "nvls"),
        (("nccl", "protocol"), "ll"),
    ):
        bad = json.loads(json.dumps(doc))
        at = bad["resources"]
        for k in path[:-1]:
            at = at[k]
        at[path[-1]] = value
        assert not v.is_valid(bad), path
    no_setting = json.loads(json.dumps(doc))
    del no_setting["resources"]["nccl"]
    assert not v.is_valid(no_setting)
    stray = json.loads(json.dumps(legacy))
    stray["resources"]["nccl"] = res.nccl.to_json()
    assert not v.is_valid(stray)  # the setting belongs to stock NCCL only
    del legacy["resources"]["default"]
    assert not v.is_valid(legacy)


def test_validate_reports_stored_built_and_partial_validate():
    """The stored report (from before the schema field), one built now and the partial documents a
    run writes after each round; what they hold of the other formats validates against those."""
    from commsched.calibrate import build_report
    from commsched.calibrate.report import partial_report
    from tests.calibrate_runs import ROUNDS, synthetic_run

    v = validator("validate.v1.json")
    v.validate(json.loads((Path(__file__).resolve().parents[1] / "data" / "validate-report.json").read_text()))
    run = synthetic_run()
    report, _, _ = build_report(run["head"], run["steps"], run["probes"], run["measured"], run["light_before"], 20, run["threads"])
    report = json.loads(json.dumps(report))
    v.validate(report)
    for key, name in (("semantics", "semantics"), ("semantics_before_run", "semantics"), ("cluster", "cluster"), ("cluster_in_rounds", "cluster")):
        validator(f"{name}.v1.json").validate(report[key])
    for plan in report["plans"].values():
        validator("plan.v1.json").validate(plan)
    for done in range(ROUNDS + 1):
        doc = partial_report(run["head"], done, run["steps"], run["probes"], run["measured"], run["light_before"])
        v.validate(json.loads(json.dumps(doc)))
    # what a reader needs is required: a finished report's rows, a partial one's rounds and steps
    for bad in (
        {k: x for k, x in report.items() if k != "stock_ddp"},
        {**report, "strategies": {"ddp": {k: x for k, x in report["strategies"]["ddp"].items() if k != "measured_s"}}},
        {**report, "stock_ddp": {**report["stock_ddp"], "measured_s": -1.0}},
        {k: x for k, x in json.loads(json.dumps(doc)).items() if k != "rounds_done"},
        {k: x for k, x in json.loads(json.dumps(doc)).items() if k != "measured_steps_s"},
        {**report, "schema": "commsched.plan/v1"},
    ):
        assert not v.is_valid(bad)
