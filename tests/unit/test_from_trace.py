"""Profiles from a torch.profiler Chrome trace, on a hand-made GPU-style trace (pure JSON, no torch).

The trace below is what torch 2.14's exporter writes for a 2-layer model trained on one GPU with
NCCL, cut to the events the parser reads: ProfilerStep annotations, forward ops with fwdbwd flow
starts, the backward engine's nodes and AccumulateGrad ops (with Input Dims) on the engine's thread,
cudaLaunchKernel events and their kernels (joined by ``correlation``), record_param_comms ops and
ncclDevKernel_AllReduce kernels. Every expected number is worked out by hand in the comments.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from commsched.errors import CommschedError
from commsched.profile.from_trace import (
    AllreduceSample,
    ParamShape,
    ParsedTrace,
    TraceStep,
    allreduce_cluster,
    cluster_doc,
    load_trace,
    match_gradients,
    parse_trace,
    profile_from_trace,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_nccl_trace.json"

# The model's gradient tensors in reference ready order (what zoo_params/module_params return).
PARAMS = (
    ParamShape("head.bias", (4,), 16),
    ParamShape("head.weight", (4, 8), 128),
    ParamShape("l2.weight", (8, 8), 256),
    ParamShape("l2.bias", (8,), 32),
    ParamShape("l1.weight", (8, 8), 256),
    ParamShape("l1.bias", (8,), 32),
)

HOST, DEV = 4242, 0  # host pid; CUDA device 0 is the kernels' pid
MAIN, ENGINE, COMPUTE, NCCL = 4242, 4250, 7, 20  # main thread, autograd device thread, streams
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEP_US = 10_000
BASE_US = 1_000_000

# Per step k: the kernels that vary (start, end offsets in us) -- each step differs in one number
# so that the profile must take the per-tensor median, not the mean or one step.
K4 = [(1000, 1300), (1000, 1360), (1000, 1300)]  # AddmmBackward0's kernel, before head's grads
K5 = [(1400, 1600), (1400, 1600), (1400, 1700)]  # MmBackward0's kernel, before l2.weight's grad
NCCL1_US = [400, 430, 390]  # bucket 1 (head.weight, head.bias, l2.weight, l2.bias): 108 floats
NCCL2_US = [80, 60, 200]  # bucket 2 (l1.bias, l1.weight): 72 floats


class _Builder:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def x(self, cat, name, ts, end, *, pid=HOST, tid=MAIN, **args):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": float(ts), "dur": float(end - ts)}
        if args:
            e["args"] = args
        self.events.append(e)
        return e

    def flow(self, ts, tid=MAIN, ph="s", fid=1):
        self.events.append({"ph": ph, "id": fid, "pid": HOST, "tid": tid, "ts": float(ts), "cat": "fwdbwd", "name": "fwdbwd"})

    def launch(self, ts, start, end, *, tid, name="void gemm_kernel<float>(...)", stream=COMPUTE, **kernel_args):
        self.corr += 1
        self.x("cuda_runtime", "cudaLaunchKernel", ts, ts + 4, tid=tid, correlation=self.corr)
        return self.x("kernel", name, start, end, pid=DEV, tid=stream, device=0, stream=stream, correlation=self.corr, **kernel_args)


def gpu_trace() -> dict:
    b = _Builder()
    for k in range(3):
        s = BASE_US + k * STEP_US
        b.x("user_annotation", f"ProfilerStep#{k + 2}", s, s + 9000)
        b.x("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", s + 10, s + 40)
        # forward: aten::linear [100, 160] around the flow's aten::addmm; its kernel runs [300, 700]
        b.x("cpu_op", "aten::linear", s + 100, s + 160, **{"Input Dims": [[2, 8], [4, 8], [4]]})
        b.x("cpu_op", "aten::addmm", s + 110, s + 150)
        b.flow(s + 110, fid=10 * k + 1)
        b.launch(s + 120, s + 300, s + 700, tid=MAIN)
        # the loss: aten::sum [200, 220], kernel [700, 800] -> forward ends on the device at 800
        b.x("cpu_op", "aten::sum", s + 200, s + 220)
        b.flow(s + 200, fid=10 * k + 2)
        b.launch(s + 210, s + 700, s + 800, tid=MAIN)
        # backward on the engine's thread
        b.x("cpu_op", "autograd::engine::evaluate_function: SumBackward0", s + 300, s + 330, tid=ENGINE)
        b.flow(s + 300, tid=ENGINE, ph="f", fid=10 * k + 2)
        b.launch(s + 310, s + 800, s + 1000, tid=ENGINE)
        b.x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", s + 340, s + 400, tid=ENGINE)
        b.launch(s + 350, s + K4[k][0], s + K4[k][1], tid=ENGINE)

        def grad(ts, shape):
            b.x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ts - 1, ts + 9, tid=ENGINE)
            b.x("cpu_op", "torch::autograd::AccumulateGrad", ts, ts + 8, tid=ENGINE,
                **{"Input Dims": [list(shape)], "Input type": ["float"]})

        grad(s + 402, (4, 8))  # head.weight: ready when K4 ends (host end 410 < 1300)
        grad(s + 420, (4,))  # head.bias: no new kernel -> ready at the same instant, backward_s 0
        b.x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", s + 430, s + 470, tid=ENGINE)
        b.launch(s + 440, s + K5[k][0], s + K5[k][1], tid=ENGINE)
        grad(s + 472, (8, 8))  # l2.weight: ready at K5's end
        b.x("cpu_op", "autograd::engine::evaluate_function: BiasBackward", s + 482, s + 490, tid=ENGINE)
        b.launch(s + 485, s + 1750, s + 1800, tid=ENGINE)
        grad(s + 492, (8,))  # l2.bias: ready at 1800
        # DDP's bucket 1: record_param_comms launches the NCCL kernel; the exporter copied the op's
        # metadata onto the kernel. The kernel runs [1810, 1810 + d] on its own stream and must not
        # count as compute (else l1.bias would be ready at 2210+ instead of 2100).
        meta1 = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 108, "Out msg nelems": 108, "Group size": 4}
        b.x("cpu_op", "record_param_comms", s + 502, s + 530, tid=ENGINE, **{"External id": 9000 + k}, **meta1)
        b.launch(s + 510, s + 1810, s + 1810 + NCCL1_US[k], tid=ENGINE, name=NCCL_KERNEL, stream=NCCL,
                 **{"External id": 9000 + k}, **meta1)
        b.x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", s + 540, s + 580, tid=ENGINE)
        b.launch(s + 550, s + 1820, s + 2100, tid=ENGINE)
        grad(s + 582, (8,))  # l1.bias before l1.weight (not the reference order): ready at 2100
        grad(s + 592, (8, 8))  # l1.weight: accumulation launches an add kernel [2100, 2150] at 595
        b.launch(s + 595, s + 2100, s + 2150, tid=ENGINE, name="void add_kernel<float>(...)")
        # DDP's bucket 2: here only the record_param_comms op carries the size (same External id)
        meta2 = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 72, "Out msg nelems": 72, "Group size": 4}
        b.x("cpu_op", "record_param_comms", s + 602, s + 620, tid=ENGINE, **{"External id": 9500 + k}, **meta2)
        b.launch(s + 610, s + 2160, s + 2160 + NCCL2_US[k], tid=ENGINE, name=NCCL_KERNEL, stream=NCCL,
                 **{"External id": 9500 + k})
        # optimizer after the backward: its kernels come after every gradient and change nothing
        b.x("user_annotation", "Optimizer.step#SGD.step", s + 700, s + 900)
        b.launch(s + 710, s + 2400, s + 2500, tid=MAIN)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 4},
        "traceEvents": b.events,
    }


# Worked out from the timeline above (us). Forward: the first kernel launched after the forward's
# host start begins at 300; the kernels launched up to the loss's end (220) finish at 800: 500 us.
FORWARD_US = 500
# Ready times after 800, per step: head.weight 500/560/500, head.bias the same, l2.weight 800/800/900,
# l2.bias 1000, l1.bias 1300, l1.weight 1350. Per-tensor medians of the step deltas:
NAMES = ("head.weight", "head.bias", "l2.weight", "l2.bias", "l1.bias", "l1.weight")
BACKWARD_US = (500, 0, 300, 200, 300, 50)


def test_fixture_file_is_the_builders_trace():
    """tests/fixtures/gpu_nccl_trace.json is this builder's output (regenerate it with
    ``python tests/unit/test_from_trace.py``); the CLI test reads it from disk."""
    assert json.loads(FIXTURE.read_text()) == gpu_trace()


def test_gpu_trace_profile_ready_order_times_and_table():
    trace = parse_trace(load_trace(FIXTURE), "gpu")
    assert trace.clock == "device" and trace.device == "NVIDIA A100-SXM4-80GB" and len(trace.steps) == 3
    assert [s.name for s in trace.steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    r = profile_from_trace(trace, PARAMS, model="two-layer", batch_size=2)
    p = r.profile
    assert p.names == NAMES
    assert [t.bytes for t in p.tensors] == [128, 16, 256, 32, 32, 256]
    assert [t.backward_s for t in p.tensors] == pytest.approx([us * 1e-6 for us in BACKWARD_US], abs=1e-9)
    assert p.forward_s == pytest.approx(FORWARD_US * 1e-6, abs=1e-9)
    assert p.source == "measured" and p.device == "NVIDIA A100-SXM4-80GB" and p.batch_size == 2
    # head.* have unique shapes; (8, 8) and (8,) are shared and matched by their order
    assert (r.match.by_unique_shape, r.match.by_order, r.match.reference_order) == (2, 4, False)
    assert any("order differs" in n for n in r.notes)

    # the all-reduces: bucket 1 = 108 floats, median 400 us; bucket 2 = 72 floats, median 80 us;
    # flat below the smallest size
    assert r.cluster is not None and r.cluster.workers == 4
    assert r.cluster.allreduce.to_json() == {"model": "table", "points": [[1, 80e-6], [288, 80e-6], [432, 400e-6]]}
    doc = cluster_doc(r)
    assert doc["time_source"] == "device kernel" and "NCCL kernel durations on the device" in doc["source"]
    assert [(s["bytes"], s["count"], s["median_s"]) for s in doc["samples"]] == [(288, 3, 80e-6), (432, 3, 400e-6)]
    from commsched.cost.cluster import cluster_from_json

    assert cluster_from_json(json.loads(json.dumps(doc))).allreduce == r.cluster.allreduce
    jsonschema = pytest.importorskip("jsonschema")
    schemas = Path(__file__).resolve().parents[2] / "schemas"
    jsonschema.Draft202012Validator(json.loads((schemas / "cluster.v1.json").read_text())).validate(doc)
    from commsched.io import profile_to_json

    jsonschema.Draft202012Validator(json.loads((schemas / "profile.v1.json").read_text())).validate(profile_to_json(p))


def test_host_clock_when_the_trace_has_no_kernels():
    """Without kernels (a CPU job) the times are the host ops' own: forward from aten::linear's start
    (100) to aten::sum's end (220), gradients ready at their AccumulateGrad's end."""
    doc = gpu_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "cuda_runtime")]
    trace = parse_trace(doc)
    assert trace.clock == "host" and trace.device == "cpu" and trace.allreduces == ()
    r = profile_from_trace(trace, PARAMS, model="m", batch_size=2)
    assert r.profile.forward_s == pytest.approx(120e-6, abs=1e-9)
    # AccumulateGrad ends: 410, 428, 480, 500, 590, 600 (host), backward from 220
    assert [t.backward_s for t in r.profile.tensors] == pytest.approx([190e-6, 18e-6, 52e-6, 20e-6, 90e-6, 10e-6], abs=1e-9)
    assert r.cluster is None and any("no all-reduce" in n for n in r.notes)


def test_matching_rule_by_shape_then_order():
    m = match_gradients([(8,), (8, 8), (4,), (8,), (8, 8), (4, 8)], PARAMS)
    assert m.names == ("l2.bias", "l2.weight", "head.bias", "l1.bias", "l1.weight", "head.weight")
    m = match_gradients([p.shape for p in PARAMS], PARAMS)
    assert m.names == tuple(p.name for p in PARAMS) and m.reference_order


@pytest.mark.parametrize(
    "params, message",
    [
        ((*PARAMS, ParamShape("extra", (3,), 12)), "6 AccumulateGrad events per step but model 'm' has 7 gradient tensors"),
        (PARAMS[:-1], "6 AccumulateGrad events per step but model 'm' has 5"),
        (
            (*PARAMS[:4], ParamShape("l1.weight", (8, 9), 288), PARAMS[5]),
            "shape 8x8 occurs 2 times in the trace's step and 1 times among the model's gradient tensors",
        ),
    ],
)
def test_gradients_that_do_not_match_the_model_are_errors(params, message):
    trace = parse_trace(gpu_trace())
    with pytest.raises(CommschedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        profile_from_trace(trace, params, model="m", batch_size=2)


def _without(doc: dict, pred) -> dict:
    doc = copy.deepcopy(doc)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not pred(e)]
    return doc


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "not a Chrome trace"),
        ({"schema": "commsched.profile/v1"}, "not a Chrome trace"),
        ({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1.0, "dur": 2.0}]}, "no ProfilerStep#N annotation"),
        (_without(gpu_trace(), lambda e: e.get("name", "").startswith("ProfilerStep")), "no ProfilerStep#N annotation"),
        (_without(gpu_trace(), lambda e: e.get("name", "").startswith("autograd::engine")), "has no backward pass"),
        (_without(gpu_trace(), lambda e: e.get("cat") == "fwdbwd"), "no forward op before its backward"),
        (_without(gpu_trace(), lambda e: e.get("name") == "torch::autograd::AccumulateGrad"), "no gradient became ready"),
        ({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": "soon", "dur": 2.0}]}, "has no numeric 'ts'"),
    ],
)
def test_malformed_traces_are_clear_errors(doc, message):
    with pytest.raises(CommschedError, match=message):
        parse_trace(doc, "t.json")


def test_gzip_traces_and_unreadable_files(tmp_path):
    import gzip

    (tmp_path / "t.json.gz").write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert load_trace(tmp_path / "t.json.gz") == load_trace(FIXTURE)
    with pytest.raises(CommschedError, match="no such file"):
        load_trace(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    with pytest.raises(CommschedError, match="bad.json: malformed JSON at line 1"):
        load_trace(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(CommschedError, match="list.json: not a Chrome trace"):
        load_trace(tmp_path / "list.json")


def test_trace_without_record_shapes_is_an_error():
    doc = gpu_trace()
    for e in doc["traceEvents"]:
        if e.get("name") == "torch::autograd::AccumulateGrad":
            del e["args"]["Input Dims"]
    with pytest.raises(CommschedError, match=r"no 'Input Dims'; record the trace with torch.profiler.profile\(record_shapes=True\)"):
        parse_trace(doc)


def test_steps_with_different_orders_are_an_error():
    doc = gpu_trace()
    last = [e for e in doc["traceEvents"] if e.get("name") == "torch::autograd::AccumulateGrad"][-6:]
    last[0]["args"]["Input Dims"], last[1]["args"]["Input Dims"] = last[1]["args"]["Input Dims"], last[0]["args"]["Input Dims"]
    with pytest.raises(CommschedError, match="order changed between steps: position 0 has shape 4x8 in ProfilerStep#2 and 4 in ProfilerStep#4"):
        profile_from_trace(parse_trace(doc), PARAMS, model="m", batch_size=2)


def test_nccl_kernel_without_a_size_is_an_error():
    doc = _without(gpu_trace(), lambda e: e.get("name") == "record_param_comms")
    with pytest.raises(CommschedError, match="has no size: neither it nor a 'record_param_comms' op"):
        parse_trace(doc)


def _parsed(samples, world=None) -> ParsedTrace:
    return ParsedTrace((TraceStep("ProfilerStep#1", 1e-3, (1e-3,), ((4,),)),), tuple(samples), "host", "cpu", world)


def test_table_pools_dips_and_needs_two_sizes_and_a_worker_count():
    gloo = lambda b, s, g=None: AllreduceSample(b, s, "gloo worker thread", g)  # noqa: E731
    # 4 KiB took longer than 64 KiB (a noisy dip): pooled to their mean, never decreasing
    cluster, note = allreduce_cluster(_parsed([gloo(4096, 3e-3), gloo(65536, 1e-3), gloo(1 << 20, 5e-3)], world=2))
    assert note == "" and cluster.workers == 2
    assert cluster.allreduce.to_json()["points"] == [[1, 2e-3], [4096, 2e-3], [65536, 2e-3], [1 << 20, 5e-3]]
    assert "gloo:all_reduce durations on gloo's worker threads" in cluster.source
    cluster, note = allreduce_cluster(_parsed([gloo(4096, 3e-3), gloo(4096, 1e-3)], world=2))
    assert cluster is None and "move 4096 bytes: a table needs two sizes" in note
    with pytest.raises(CommschedError, match="2 all-reduces but no worker count"):
        allreduce_cluster(_parsed([gloo(4096, 3e-3), gloo(8192, 4e-3)]))
    with pytest.raises(CommschedError, match=r"process groups of different sizes \(2, 4\)"):
        allreduce_cluster(_parsed([gloo(4096, 3e-3, 2), gloo(8192, 4e-3, 4)], world=4))


def test_gloo_allreduce_sizes_from_input_dims():
    doc = gpu_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "cuda_runtime")]
    doc["traceEvents"].append(
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": HOST, "tid": 99, "ts": 1.0e6 + 600,
         "dur": 1500.0, "args": {"Input Dims": [[650], [10]], "Input type": ["float", "c10::Half"]}}
    )
    assert parse_trace(doc).allreduces == (AllreduceSample(650 * 4 + 10 * 2, 1.5e-3, "gloo worker thread"),)


def test_parsing_imports_no_torch():
    code = (
        "import sys, json\n"
        "from commsched.profile.from_trace import load_trace, parse_trace, profile_from_trace, ParamShape\n"
        f"t = parse_trace(load_trace({str(FIXTURE)!r}))\n"
        "ps = [ParamShape(n, tuple(s), b) for n, s, b in "
        f"{[(p.name, p.shape, p.bytes) for p in PARAMS]!r}]\n"
        "profile_from_trace(t, ps, model='m', batch_size=2)\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not bad, bad[:5]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


if __name__ == "__main__":  # regenerate the fixture file
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(gpu_trace(), indent=1) + "\n")
