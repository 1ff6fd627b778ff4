"""``profile --from-trace`` on a trace recorded on a GPU: make gpu-check's resnet50 (batch 256) on an
NVIDIA H200, torch 2.11 (benchmarks/data/gpu-check/2026-11-27-h200/trace.json.gz, 3 active steps,
``record_shapes=True``). The same run's ``profile --measure`` on that GPU (profiles.json beside it)
is what it must agree with: the tensors in the same order and bytes, forward and total backward
within 10% (issue 31, item 4). Read on the CPU, so the reader is checked in every test run, not only
when a GPU is lent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gpu-check" / "2026-11-27-h200"


@pytest.fixture(scope="module")
def measured() -> dict:
    return json.loads((RUN / "profiles.json").read_text())["resnet50"]["measured"]


def test_the_h200_trace_with_its_model_agrees_with_measure_on_that_gpu(measured):
    from commsched.profile.from_trace import profile_trace_file

    result, cluster = profile_trace_file(RUN / "trace.json.gz", model="resnet50", batch_size=256)
    p = result.profile
    assert cluster is None  # one GPU, no all-reduce in the trace
    assert result.steps == 3 and p.device == measured["device"] == "NVIDIA H200"
    assert list(p.names) == [t["name"] for t in measured["tensors"]]
    assert [t.bytes for t in p.tensors] == [t["bytes"] for t in measured["tensors"]]
    assert p.forward_s == pytest.approx(measured["forward_s"], rel=0.10)
    backward = sum(t["backward_s"] for t in measured["tensors"])
    assert sum(t.backward_s for t in p.tensors) == pytest.approx(backward, rel=0.10)
    # and what the reader made of this trace on the GPU machine, to the last digit it wrote
    there = json.loads((RUN / "profiles.json").read_text())["resnet50"]["from_trace"]
    assert p.forward_s == pytest.approx(there["forward_s"], rel=1e-9)
    assert [t.backward_s for t in p.tensors] == pytest.approx([t["backward_s"] for t in there["tensors"]], rel=1e-9, abs=1e-12)


def test_the_h200_trace_without_a_model_names_gradients_by_shape_with_the_same_times(measured):
    from commsched.profile.from_trace import profile_trace_file

    with_model, _ = profile_trace_file(RUN / "trace.json.gz", model="resnet50", batch_size=256)
    alone, _ = profile_trace_file(RUN / "trace.json.gz")
    assert len(alone.profile.names) == 161 and alone.profile.names[1].startswith("grad.001[")
    assert [t.bytes for t in alone.profile.tensors] == [t.bytes for t in with_model.profile.tensors]
    assert alone.profile.forward_s == pytest.approx(with_model.profile.forward_s, rel=1e-9)
    assert [t.backward_s for t in alone.profile.tensors] == pytest.approx([t.backward_s for t in with_model.profile.tensors])
