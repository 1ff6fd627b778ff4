"""Profiles from a torch.profiler Chrome trace, on hand-made GPU traces (pure JSON, no torch).

One training timeline -- a 2-layer model trained on one GPU with NCCL, 3 steps -- written the way
three generations of torch's exporter write it, cut to a few events per kind but with each kind's
real categories, names and args:

- ``"2.14"``: torch 2.14's exporter (``torch/profiler/_chrome_trace_export.py``): ``cpu_op`` and
  ``user_annotation`` rows on the host, the GPU copies of every range that launched device work as
  ``gpu_user_annotation`` rows on the device (``ProfilerStep#N`` included), ``fwdbwd`` flows,
  kernels with their full args (grid, block, ...), the launching ``record_param_comms`` op's
  metadata copied onto NCCL kernels, ``ac2g`` launch flows.
- ``"1.13"``: what the published 8- and 16-rank traces hold (torch ~1.12-2.0, kineto C++): no
  ``fwdbwd`` flows (the forward is found from ``Sequence number`` args, which older torch also stamps
  on ops that create no node), ``record_param_comms`` without metadata, sizes only on the
  ``nccl:all_reduce`` op, a kernel's ``External id`` equal to its correlation, an all-reduce kernel
  named ``ncclKernel_SendRecv_...`` (NCCL 2.12-2.18), no ``Group size``.
- ``"1.8"``: kineto before June 2021: ``Operator``/``Runtime``/``Kernel``/``Memcpy`` categories,
  ``User`` rows for the GPU copies, string thread ids, no autograd-engine events (backward nodes are
  the ops with ``Fwd thread id`` 1), no ``distributedInfo``.

The same timeline in each: a non-blocking copy of the next batch on a side stream (must not hold
back any gradient), an all-to-all (not an all-reduce), an AccumulateGrad with an undefined gradient
(not a gradient). Every expected number is worked out by hand in the comments.
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
    trace_params,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_nccl_trace.json"
STYLES = ("2.14", "1.13", "1.8")

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
MAIN, ENGINE = 4242, 4250  # main thread, autograd device thread
COMPUTE, NCCL, SIDE = 7, 20, 13  # streams: the default one, NCCL's, a prefetcher's
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEP_US = 10_000
BASE_US = 1_000_000

# Per step k: the kernels that vary (start, end offsets in us) -- each step differs in one number
# so that the profile must take the per-tensor median, not the mean or one step.
K4 = [(1000, 1300), (1000, 1360), (1000, 1300)]  # AddmmBackward0's kernel, before head's grads
K5 = [(1400, 1600), (1400, 1600), (1400, 1700)]  # MmBackward0's kernel, before l2.weight's grad
NCCL1_US = [400, 430, 390]  # bucket 1 (head.weight, head.bias, l2.weight, l2.bias): 108 floats
NCCL2_US = [80, 60, 200]  # bucket 2 (l1.bias, l1.weight): 72 floats
WORLD = 4


class _Builder:
    """Events as ``style``'s exporter writes them (module docs)."""

    def __init__(self, style: str) -> None:
        self.style = style
        self.events: list[dict] = []
        self.corr = 0
        self.ext = 0
        self.flow_id = 0

    @property
    def old(self) -> bool:
        return self.style != "2.14"

    def _tid(self, tid):
        return str(tid) if self.style == "1.8" else tid

    def _stream(self, stream):
        return f"stream {stream}" if self.style == "1.8" else stream

    def _ts(self, t):
        return float(t) if self.style == "2.14" else int(t)

    def _host(self, cat, name, ts, end, tid, args):
        self.ext += 1
        common = {
            "2.14": {"External id": self.ext, "Record function id": 0, "Ev Idx": self.ext - 1},
            "1.13": {"Trace name": "PyTorch Profiler", "Trace iteration": 0, "External id": self.ext,
                     "Profiler Event Index": self.ext - 1, "Module Hierarchy": "", "Call stack": ""},
            "1.8": {"Device": HOST, "External id": self.ext, "Trace name": "PyTorch Profiler", "Trace iteration": 0},
        }[self.style]
        cat = "Operator" if self.style == "1.8" else cat
        e = {"ph": "X", "cat": cat, "name": name, "pid": HOST, "tid": self._tid(tid), "ts": self._ts(ts),
             "dur": self._ts(end - ts), "args": {**common, **args}}
        self.events.append(e)
        return e

    def op(self, name, ts, end, *, tid=MAIN, seq=None, fwd=None, flow=False, **args):
        """A host op; ``seq``/``fwd``: its Sequence number and Fwd thread id; ``flow``: the 2.14
        exporter's fwdbwd flow start on it (the latest op of its sequence number)."""
        extra = {}
        if seq is not None:
            extra = {"Fwd thread id": 0 if fwd is None else fwd, "Sequence number": seq}
        e = self._host("cpu_op", name, ts, end, tid, {**args, **extra})
        if flow and self.style == "2.14":
            self.flow_id += 1
            self.events.append({"ph": "s", "id": self.flow_id, "pid": HOST, "tid": tid, "ts": float(ts), "cat": "fwdbwd", "name": "fwdbwd"})
        return e

    def note(self, name, ts, end, *, tid=MAIN, **args):
        """A user annotation (record_function) on the host."""
        return self._host("user_annotation", name, ts, end, tid, args)

    def gpu_note(self, name, ts, end, ext, stream):
        """The GPU copy of a host annotation over the device work it launched (none in 1.13's traces)."""
        if self.style == "2.14":
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": DEV, "tid": stream,
                                "ts": float(ts), "dur": float(end - ts), "args": {"External id": ext}})
        elif self.style == "1.8":
            self.events.append({"ph": "X", "cat": "User", "name": name, "pid": DEV, "tid": f"stream {stream} user",
                                "ts": int(ts), "dur": int(end - ts), "args": {"External id": ext}})

    def node(self, name, ts, end, seq, *, tid=ENGINE):
        """A backward node: the engine's event around the node's op (2.14, 1.13); the op alone (1.8)."""
        if self.style == "1.8":
            return self.op(name.removesuffix("0"), ts, end, tid=tid, seq=seq, fwd=1)
        self.op(f"autograd::engine::evaluate_function: {name}", ts, end, tid=tid, seq=seq, fwd=1)
        return self.op(name, ts + 1, end - 1, tid=tid, seq=seq, fwd=1)

    def grad(self, ts, shape, dtype="float"):
        """AccumulateGrad of a gradient of ``shape`` (the engine's event around it but in 1.8)."""
        if self.style != "1.8":
            self.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ts - 1, ts + 9, tid=ENGINE)
        self.op("torch::autograd::AccumulateGrad", ts, ts + 8, tid=ENGINE, **{"Input Dims": [list(shape)], "Input type": [dtype]})

    def launch(self, ts, start, end, *, tid, ext, name="void gemm_kernel<float>(...)", stream=COMPUTE, cat="kernel", **meta):
        """A launch on the host and its work on the device, joined by ``correlation``."""
        self.corr += 1
        c = self.corr
        runtime = "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync"
        cbid = 211 if cat == "kernel" else 41
        if self.style == "1.8":
            rargs = {"cbid": cbid, "correlation": c, "external id": ext, "external ts": int(ts)}
            wargs = {"queued": 0, "device": DEV, "context": 1, "stream": stream, "correlation": c, "external id": ext}
            rcat, wcat = "Runtime", {"kernel": "Kernel", "gpu_memcpy": "Memcpy"}[cat]
            flow_cat, flow_name = "async", "launch"
        else:
            link = ext if self.style == "2.14" else c  # 1.13: a device event's External id is its correlation
            rargs = {"External id": link, "cbid": cbid, "correlation": c}
            wargs = {"External id": link, "queued": 0, "device": DEV, "context": 1, "stream": stream, "correlation": c}
            rcat, wcat = "cuda_runtime", cat
            flow_cat, flow_name = ("ac2g", "ac2g") if self.style == "2.14" else ("async_cpu_to_gpu", "async_gpu")
        if cat == "kernel":
            nccl = name.startswith("nccl")
            wargs.update({"registers per thread": 96 if nccl else 32, "shared memory": 42024 if nccl else 0,
                          "blocks per SM": 0.0185, "warps per SM": 0.37, "grid": [2, 1, 1] if nccl else [64, 1, 1],
                          "block": [640, 1, 1] if nccl else [256, 1, 1], "est. achieved occupancy %": 1})
        else:
            wargs.update({"bytes": 262144, "memory bandwidth (GB/s)": 0.1})
        wargs.update(meta)
        self.events.append({"ph": "X", "cat": rcat, "name": runtime, "pid": HOST, "tid": self._tid(tid), "ts": self._ts(ts),
                            "dur": self._ts(4), "args": rargs})
        self.events.append({"ph": "s", "id": c, "pid": HOST, "tid": self._tid(tid), "ts": self._ts(ts), "cat": flow_cat, "name": flow_name})
        self.events.append({"ph": "X", "cat": wcat, "name": name, "pid": DEV, "tid": self._stream(stream), "ts": self._ts(start),
                            "dur": self._ts(end - start), "args": wargs})
        self.events.append({"ph": "f", "id": c, "pid": DEV, "tid": self._stream(stream), "ts": self._ts(start), "cat": flow_cat,
                            "name": flow_name, "bp": "e"})

    def collective(self, coll, ts, end, launch_ts, start, dur, *, tid, nelems, kernel, copy_meta):
        """A collective as each version's ProcessGroupNCCL records it, and its NCCL kernel."""
        meta = {"Collective name": coll, "dtype": "Float", "In msg nelems": nelems, "Out msg nelems": nelems,
                "In split size": "[]", "Out split size": "[]", "Global rank start": 0, "Global rank stride": 1,
                "Group size": WORLD, "Process Group Name": "0", "Process Group Description": "default_pg",
                "Process Group Ranks": "[0, 1, 2, 3]"}
        title = {"allreduce": "nccl:all_reduce", "all_to_all": "nccl:all_to_all"}[coll]
        if self.style == "2.14":
            self.op(f"c10d::{coll.replace('all_to_all', 'alltoall_base')}_", ts - 1, end + 1, tid=tid)
            rpc = self.op("record_param_comms", ts, end, tid=tid, **meta)
            self.note(title, ts + 3, end - 2, tid=tid)
            self.launch(launch_ts, start, start + dur, tid=tid, ext=rpc["args"]["External id"], name=kernel, stream=NCCL,
                        **(meta if copy_meta else {}))
            self.gpu_note(title, start, start + dur, rpc["args"]["External id"], NCCL)
        elif self.style == "1.13":
            self.op(f"c10d::{coll.replace('all_to_all', 'alltoall_base')}_", ts - 1, end + 1, tid=tid,
                    **{"Input Dims": [[], [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"]})
            self.op("record_param_comms", ts, end, tid=tid)
            self.note(title, ts + 3, end - 2, tid=tid, **{"Input Dims": [[nelems]], "Input type": ["float"]})
            self.launch(launch_ts, start, start + dur, tid=tid, ext=0, name=kernel, stream=NCCL)
        else:
            n = self.note(title, ts + 3, end - 2, tid=tid, **{"Input Dims": [[nelems]], "Input type": ["float"]})
            self.launch(launch_ts, start, start + dur, tid=tid, ext=n["args"]["External id"], name=kernel, stream=NCCL)


def gpu_trace(style: str = "2.14") -> dict:
    b = _Builder(style)
    for k in range(3):
        s = BASE_US + k * STEP_US
        step = b.note(f"ProfilerStep#{k + 2}", s, s + 9000)
        b.note("Optimizer.zero_grad#SGD.zero_grad", s + 10, s + 40)
        # older torch stamps the next sequence number on ops that create no node: aten::zero_ (in
        # zero_grad) and aten::to (data loading) carry 1, the number aten::t's node gets at 102; the
        # latest op of a number is its node's (taking the earliest would start the forward at 15)
        b.op("aten::zero_", s + 15, s + 20, **({"seq": 1} if b.old else {}))
        b.op("aten::to", s + 50, s + 60, **({"seq": 1} if b.old else {}))
        # forward: aten::linear [100, 160] around aten::t and aten::addmm, whose kernel runs [300, 700]
        b.op("aten::linear", s + 100, s + 160, seq=1, **{"Input Dims": [[2, 8], [4, 8], [4]], "Input type": ["float"] * 3})
        b.op("aten::t", s + 102, s + 106, seq=1, flow=True)
        addmm = b.op("aten::addmm", s + 110, s + 150, seq=2, flow=True)
        b.launch(s + 120, s + 300, s + 700, tid=MAIN, ext=addmm["args"]["External id"])
        # the next batch copied to the GPU on a side stream, [170, 2600]: it must not hold back any
        # gradient nor start the forward (the compute stream's first forward kernel starts at 300)
        cp = b.op("aten::copy_", s + 162, s + 164, **({"seq": 3} if b.old else {}))
        b.launch(s + 163, s + 170, s + 2600, tid=MAIN, ext=cp["args"]["External id"], name="Memcpy HtoD (Pinned -> Device)",
                 stream=SIDE, cat="gpu_memcpy")
        b.op("aten::relu", s + 165, s + 170, seq=3, flow=True)
        b.op("aten::mm", s + 172, s + 180, seq=4, flow=True)
        b.op("aten::mm", s + 182, s + 190, seq=5, flow=True)
        # the loss: aten::sum [200, 220], kernel [700, 800] -> forward ends on the device at 800
        total = b.op("aten::sum", s + 200, s + 220, seq=6, flow=True)
        b.launch(s + 210, s + 700, s + 800, tid=MAIN, ext=total["args"]["External id"])
        b.op("aten::ones_like", s + 224, s + 228, **({"seq": 7} if b.old else {}))  # no node 7: not forward
        # an all-to-all between the loss and the backward (a pipeline's input distribution): its kernel
        # is named SendRecv like an all-reduce's in 1.13 -- only the host op tells them apart
        b.collective("all_to_all", s + 230, s + 250, s + 240, s + 260, 30, tid=MAIN, nelems=64, copy_meta=True,
                     kernel={"2.14": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"}.get(
                         style, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"))
        # backward on the engine's thread
        e = b.node("SumBackward0", s + 300, s + 330, 6)
        b.launch(s + 310, s + 800, s + 1000, tid=ENGINE, ext=e["args"]["External id"])
        e = b.node("AddmmBackward0", s + 340, s + 400, 2)
        b.launch(s + 350, s + K4[k][0], s + K4[k][1], tid=ENGINE, ext=e["args"]["External id"])
        b.grad(s + 402, (4, 8))  # head.weight: ready when K4 ends (host end 410 < 1300)
        b.grad(s + 420, (4,))  # head.bias: no new kernel -> ready at the same instant, backward_s 0
        b.node("TBackward0", s + 425, s + 429, 1)  # launches nothing
        e = b.node("MmBackward0", s + 430, s + 470, 5)
        b.launch(s + 440, s + K5[k][0], s + K5[k][1], tid=ENGINE, ext=e["args"]["External id"])
        b.grad(s + 472, (8, 8))  # l2.weight: ready at K5's end
        e = b.node("ReluBackward0", s + 482, s + 490, 3)
        b.launch(s + 485, s + 1750, s + 1800, tid=ENGINE, ext=e["args"]["External id"])
        b.grad(s + 492, (8,))  # l2.bias: ready at 1800
        # DDP's bucket 1: 108 floats. In 2.14 the exporter copied record_param_comms' metadata onto the
        # kernel; in 1.13 the size is only on nccl:all_reduce and the kernel is named SendRecv (NCCL
        # 2.12-2.18). The kernel runs [1810, 1810 + d] on its own stream and must not count as compute
        # (else l1.bias would be ready at 2210+ instead of 2100).
        b.collective("allreduce", s + 502, s + 530, s + 510, s + 1810, NCCL1_US[k], tid=ENGINE, nelems=108, copy_meta=True,
                     kernel={"2.14": NCCL_KERNEL, "1.13": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"}.get(
                         style, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclColl)"))
        e = b.node("MmBackward0", s + 540, s + 580, 4)
        b.launch(s + 550, s + 1820, s + 2100, tid=ENGINE, ext=e["args"]["External id"])
        b.grad(s + 582, (8,))  # l1.bias before l1.weight (not the reference order): ready at 2100
        b.grad(s + 592, (8, 8))  # l1.weight: accumulation launches an add kernel [2100, 2150] at 595
        b.launch(s + 595, s + 2100, s + 2150, tid=ENGINE, ext=b.ext, name="void add_kernel<float>(...)")
        # DDP's bucket 2: 72 floats; in 2.14 only the record_param_comms op around the launch has the size
        b.collective("allreduce", s + 602, s + 620, s + 610, s + 2160, NCCL2_US[k], tid=ENGINE, nelems=72, copy_meta=False,
                     kernel={"2.14": NCCL_KERNEL}.get(style, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"))
        # a node returned no gradient for a parameter: AccumulateGrad with an undefined one, no gradient
        b.grad(s + 623, (), dtype="")
        # optimizer after the backward: its kernels come after every gradient and change nothing
        opt = b.note("Optimizer.step#SGD.step", s + 700, s + 900)
        b.launch(s + 710, s + 2400, s + 2500, tid=MAIN, ext=opt["args"]["External id"])
        b.gpu_note("Optimizer.step#SGD.step", s + 2400, s + 2500, opt["args"]["External id"], COMPUTE)
        # the step's GPU copy spans the device work launched from the main thread: [170, 2600]
        b.gpu_note(step["name"], s + 170, s + 2600, step["args"]["External id"], COMPUTE)
    doc = {"schemaVersion": 1}
    if style != "1.8":
        doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920}]
        doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": WORLD}
    else:
        doc["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16945512448}]
    meta = [{"ph": "M", "name": "process_name", "ts": float(BASE_US), "pid": pid, "tid": 0, "args": {"name": "python"}} for pid in (HOST, DEV)]
    span = [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": float(BASE_US), "dur": 3.0 * STEP_US, "args": {"Op count": 0}},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": float(BASE_US + 3 * STEP_US)}]
    doc["traceEvents"] = meta + b.events + span
    return doc


# Worked out from the timeline above (us), the same in every style. Forward: the first compute-stream
# kernel launched after the forward's host start (aten::linear, 100) begins at 300; the kernels
# launched up to the loss's end (220) finish at 800: 500 us.
FORWARD_US = 500
# Ready times after 800, per step: head.weight 500/560/500, head.bias the same, l2.weight 800/800/900,
# l2.bias 1000, l1.bias 1300, l1.weight 1350. Per-tensor medians of the step deltas:
NAMES = ("head.weight", "head.bias", "l2.weight", "l2.bias", "l1.bias", "l1.weight")
BACKWARD_US = (500, 0, 300, 200, 300, 50)
# the cluster: bucket 1 = 108 floats, median 400 us; bucket 2 = 72 floats, median 80 us; flat below
TABLE = {"model": "table", "points": [[1, 80e-6], [288, 80e-6], [432, 400e-6]]}


def _without(doc: dict, pred) -> dict:
    doc = copy.deepcopy(doc)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not pred(e)]
    return doc


HOST_CATS = ("cpu_op", "user_annotation", "operator", "fwdbwd")


def _host_only(doc: dict) -> dict:
    """The trace of the same job on the CPU: no device rows, no launches."""
    return _without(doc, lambda e: e.get("ph") in ("X", "s", "f") and str(e.get("cat")).lower() not in HOST_CATS)


def _real_grads(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("name") == "torch::autograd::AccumulateGrad" and e["args"].get("Input type") != [""]]


def test_fixture_file_is_the_builders_trace():
    """tests/fixtures/gpu_nccl_trace.json is this builder's 2.14 output (regenerate it with
    ``python tests/unit/test_from_trace.py``); the CLI test reads it from disk."""
    assert json.loads(FIXTURE.read_text()) == gpu_trace()


@pytest.mark.parametrize("style", STYLES)
def test_every_torch_version_gives_the_same_profile(style):
    trace = parse_trace(gpu_trace(style), style)
    assert trace.clock == "device" and len(trace.steps) == 3 and trace.skipped_steps == ()
    assert [s.name for s in trace.steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert trace.device == ("Tesla V100-SXM2-16GB" if style == "1.8" else "NVIDIA A100-SXM4-80GB")
    # 1.13 and 1.8 write no fwdbwd flows: the forward comes from the ops' sequence numbers
    assert trace.forward_from == ("fwdbwd flows" if style == "2.14" else "sequence numbers")
    assert trace.undefined_gradients == 3  # one per step, left out
    r = profile_from_trace(trace, PARAMS, model="two-layer", batch_size=2)
    p = r.profile
    assert p.names == NAMES
    assert [t.bytes for t in p.tensors] == [128, 16, 256, 32, 32, 256]
    assert [t.backward_s for t in p.tensors] == pytest.approx([us * 1e-6 for us in BACKWARD_US], abs=1e-9)
    assert p.forward_s == pytest.approx(FORWARD_US * 1e-6, abs=1e-9)
    assert p.source == "measured" and p.batch_size == 2
    # head.* have unique shapes; (8, 8) and (8,) are shared and matched by their order
    assert (r.match.by_unique_shape, r.match.by_order, r.match.reference_order) == (2, 4, False)
    assert any("order differs" in n for n in r.notes)
    assert any("3 AccumulateGrad event(s) with an undefined gradient" in n for n in r.notes)
    assert any("found from their 'Sequence number' args" in n for n in r.notes) == (style != "2.14")
    # the all-reduces, told from the all-to-all by the host op that launched them (in 1.13 both
    # kernels are named SendRecv), sized from the kernel, record_param_comms or nccl:all_reduce
    got = sorted((s.bytes, round(s.duration_s * 1e6, 6)) for s in trace.allreduces)
    assert got == sorted([(432, us) for us in NCCL1_US] + [(288, us) for us in NCCL2_US])
    assert trace.allreduces_left_out == 0
    if style == "1.8":  # no Group size, no distributedInfo: no worker count, no cluster
        assert r.cluster is None and any("no worker count" in n for n in r.notes)
        return
    assert r.cluster is not None and r.cluster.workers == WORLD
    assert r.cluster.allreduce.to_json() == TABLE


def test_gpu_trace_cluster_document_and_schemas():
    r = profile_from_trace(parse_trace(load_trace(FIXTURE), "gpu"), PARAMS, model="two-layer", batch_size=2)
    doc = cluster_doc(r)
    assert doc["time_source"] == "device kernel" and "NCCL kernel durations on the device" in doc["source"]
    assert [(s["bytes"], s["count"], s["median_s"]) for s in doc["samples"]] == [(288, 3, 80e-6), (432, 3, 400e-6)]
    from commsched.cost.cluster import cluster_from_json

    assert cluster_from_json(json.loads(json.dumps(doc))).allreduce == r.cluster.allreduce
    jsonschema = pytest.importorskip("jsonschema")
    schemas = Path(__file__).resolve().parents[2] / "schemas"
    jsonschema.Draft202012Validator(json.loads((schemas / "cluster.v1.json").read_text())).validate(doc)
    from commsched.formats.io import profile_to_json

    jsonschema.Draft202012Validator(json.loads((schemas / "profile.v1.json").read_text())).validate(profile_to_json(r.profile))


@pytest.mark.parametrize("style, cat", [("2.14", "gpu_user_annotation"), ("1.8", "User")])
def test_the_gpu_copies_of_step_annotations_are_not_steps(style, cat):
    """ProfilerStep#N is written on the host and again over its work on the GPU's row; the GPU copy
    starts later and overlaps the host one (read as two overlapping steps, it was an error)."""
    doc = gpu_trace(style)
    copies = [e for e in doc["traceEvents"] if e.get("cat") == cat and e["name"].startswith("ProfilerStep#")]
    assert len(copies) == 3 and all(e["pid"] == DEV for e in copies)
    assert [s.name for s in parse_trace(doc).steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    only_gpu = _without(doc, lambda e: e.get("name", "").startswith("ProfilerStep#") and e.get("cat") != cat)
    with pytest.raises(CommschedError, match="no ProfilerStep#N annotation on a host thread"):
        parse_trace(only_gpu, "t.json")


def test_work_on_other_streams_does_not_hold_back_gradients():
    """The next batch's copy on a side stream ([170, 2600], launched inside the forward) starts before
    the forward's first kernel and ends after every gradient: only the compute stream (the one the
    backward's nodes launched on) times the forward and the gradients. GPU copies of annotations are
    removed here, so the rule is tested alone."""
    doc = _without(gpu_trace(), lambda e: e.get("cat") == "gpu_user_annotation")
    r = profile_from_trace(parse_trace(doc), PARAMS, model="m", batch_size=2)
    assert r.profile.forward_s == pytest.approx(FORWARD_US * 1e-6, abs=1e-9)
    assert [t.backward_s for t in r.profile.tensors] == pytest.approx([us * 1e-6 for us in BACKWARD_US], abs=1e-9)
    # the same copy on the compute stream does count: the forward runs from its start (170) to its
    # end (2600, launched before the loss's end), and every gradient is ready by then
    for e in doc["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":
            e["tid"] = e["args"]["stream"] = COMPUTE
    r = profile_from_trace(parse_trace(doc), PARAMS, model="m", batch_size=2)
    assert r.profile.forward_s == pytest.approx((2600 - 170) * 1e-6, abs=1e-9)
    assert [t.backward_s for t in r.profile.tensors] == pytest.approx([0.0] * 6, abs=1e-9)


@pytest.mark.parametrize("style", STYLES)
def test_host_clock_when_the_trace_has_no_kernels(style):
    """Without kernels (a CPU job) the times are the host ops' own: forward from aten::linear's start
    (100) to aten::sum's end (220) -- with sequence numbers, each number's latest op: aten::zero_ at 15
    carries aten::t's number too -- and gradients ready at their AccumulateGrad's end."""
    trace = parse_trace(_host_only(gpu_trace(style)))
    assert trace.clock == "host" and trace.device == "cpu" and trace.allreduces == ()
    r = profile_from_trace(trace, PARAMS, model="m", batch_size=2)
    assert r.profile.forward_s == pytest.approx(120e-6, abs=1e-9)
    # AccumulateGrad ends: 410, 428, 480, 500, 590, 600 (host), backward from 220
    assert [t.backward_s for t in r.profile.tensors] == pytest.approx([190e-6, 18e-6, 52e-6, 20e-6, 90e-6, 10e-6], abs=1e-9)
    assert r.cluster is None and any("no all-reduce" in n for n in r.notes)
    assert [s.gap_s for s in trace.steps] == pytest.approx([80e-6] * 3)  # loss end 220 to SumBackward0 at 300


def test_sequence_numbers_find_the_forward_the_flows_mark():
    """Torch's exporter draws a fwdbwd flow from the latest op of each backward node's sequence
    number; without the flows the same ops come from the args (2.14 trace, flows removed)."""
    doc = gpu_trace()
    without = _without(doc, lambda e: e.get("cat") == "fwdbwd")
    a, b = parse_trace(doc), parse_trace(without)
    assert (a.forward_from, b.forward_from) == ("fwdbwd flows", "sequence numbers")
    assert a.steps == b.steps
    a, b = parse_trace(_host_only(doc)), parse_trace(_host_only(without))
    assert a.steps == b.steps and a.steps[0].forward_s == pytest.approx(120e-6, abs=1e-9)


def test_a_step_without_a_backward_is_left_out():
    """The profiler stopped just after prof.step() opened a step (an empty last step), or an
    evaluation step: left out with a note; the others are read."""
    doc = gpu_trace()
    end = BASE_US + 3 * STEP_US
    doc["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": HOST, "tid": MAIN, "ts": float(end), "dur": 49.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": HOST, "tid": MAIN, "ts": float(end + 5), "dur": 2.0},
    ]
    trace = parse_trace(doc)
    assert len(trace.steps) == 3 and trace.skipped_steps == ("ProfilerStep#5",)
    assert any("1 step(s) without a backward pass left out: ProfilerStep#5" in n for n in trace.notes)


def test_an_undefined_gradient_is_not_a_gradient():
    """AccumulateGrad with Input type "" received no gradient (a node returned None): not counted,
    else it would be a 7th gradient a model with 6 does not have."""
    trace = parse_trace(gpu_trace())
    assert [len(s.shapes) for s in trace.steps] == [6, 6, 6] and () not in trace.steps[0].shapes
    assert len(_real_grads(gpu_trace())) == 18


def test_allreduces_are_told_by_the_op_that_launched_them():
    """NCCL 2.12-2.18 launch an all-reduce as ncclKernel_SendRecv_...: the host op around the launch
    (nccl:all_reduce, record_param_comms' Collective name) says what ran, not the kernel's name."""
    doc = _without(gpu_trace(), lambda e: e.get("cat") == "gpu_user_annotation")
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            e["name"] = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
            e["args"].pop("Collective name", None)
    trace = parse_trace(doc)
    assert sorted(s.bytes for s in trace.allreduces) == [288] * 3 + [432] * 3  # the all-to-all's 256 bytes are not
    r = profile_from_trace(trace, PARAMS, model="m", batch_size=2)
    assert r.cluster is not None and r.cluster.allreduce.to_json() == TABLE


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


def _no_forward_link(doc: dict) -> dict:
    doc = _without(doc, lambda e: e.get("cat") == "fwdbwd")
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Sequence number", None)
    return doc


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "not a Chrome trace"),
        ({"schema": "commsched.profile/v1"}, "not a Chrome trace"),
        ({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1.0, "dur": 2.0}]}, "no ProfilerStep#N annotation"),
        (_without(gpu_trace(), lambda e: e.get("name", "").startswith("ProfilerStep")), "no ProfilerStep#N annotation"),
        (_without(gpu_trace(), lambda e: e.get("name", "").startswith("autograd::engine") or "Fwd thread id" in e.get("args", {})),
         "none of the 3 steps has a backward pass"),
        (_no_forward_link(gpu_trace()), "has no forward op before its backward: no 'fwdbwd' flow event, and no op"),
        (_without(gpu_trace(), lambda e: e.get("name") == "torch::autograd::AccumulateGrad"), "no gradient became ready"),
        ({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": "soon", "dur": 2.0}]}, "has no numeric 'ts'"),
    ],
)
def test_malformed_traces_are_clear_errors(doc, message):
    with pytest.raises(CommschedError, match=message):
        parse_trace(doc, "t.json")


def test_the_timeline_plan_predicts_is_not_taken_for_a_jobs_trace():
    """`plan` and `validate` write Chrome traces too: read as a job's trace each is named for what it is."""
    from commsched.cost.models import AlphaBeta
    from commsched.planners import WFBP
    from commsched.planners.base import plan_and_timeline
    from commsched.report.trace import chrome_trace
    from commsched.types import ModelProfile, TensorSpec

    profile = ModelProfile("m", 8, "V100", "estimated", 1e-3, (TensorSpec("a", 4096, 1e-3), TensorSpec("b", 4096, 1e-3)))
    _, timeline = plan_and_timeline(WFBP(), profile, AlphaBeta(1e-5, 1e-9))
    predicted = json.loads(json.dumps(chrome_trace({"wfbp": timeline})))  # as read back from the file
    with pytest.raises(CommschedError, match=r"t.json is a timeline commsched wrote \(the trace.json `plan` writes\), not a torch.profiler trace"):
        parse_trace(predicted, "t.json")
    measured = json.loads(json.dumps(chrome_trace({"wfbp": timeline}, "measured")))
    with pytest.raises(CommschedError, match=r"commsched wrote \(validate's measured-trace.json\)"):
        parse_trace(measured, "t.json")


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
    last = _real_grads(doc)[-6:]
    last[0]["args"]["Input Dims"], last[1]["args"]["Input Dims"] = last[1]["args"]["Input Dims"], last[0]["args"]["Input Dims"]
    with pytest.raises(CommschedError, match="order changed between steps: position 0 has shape 4x8 in ProfilerStep#2 and 4 in ProfilerStep#4"):
        profile_from_trace(parse_trace(doc), PARAMS, model="m", batch_size=2)


def test_an_allreduce_without_a_size_is_left_out_with_a_note():
    """Bucket 2's kernel carries no size and, without record_param_comms, nothing around its launch
    does: its 3 all-reduces are left out and the profile stands (bucket 1's kernels carry theirs)."""
    doc = _without(gpu_trace(), lambda e: e.get("name") == "record_param_comms")
    trace = parse_trace(doc)
    assert sorted(s.bytes for s in trace.allreduces) == [432] * 3 and trace.allreduces_left_out == 3
    r = profile_from_trace(trace, PARAMS, model="m", batch_size=2)
    assert r.profile.names == NAMES and r.cluster is None
    assert any("3 NCCL all-reduce(s) left out of the cluster: no readable size" in n for n in r.notes)
    assert any("move 432 bytes: a table needs two sizes" in n for n in r.notes)


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
    cluster, note = allreduce_cluster(_parsed([gloo(4096, 3e-3), gloo(8192, 4e-3)]))
    assert cluster is None and "2 all-reduces but no worker count" in note
    with pytest.raises(CommschedError, match=r"process groups of different sizes \(2, 4\)"):
        allreduce_cluster(_parsed([gloo(4096, 3e-3, 2), gloo(8192, 4e-3, 4)], world=4))


def test_gloo_allreduce_sizes_from_input_dims():
    doc = _host_only(gpu_trace())
    doc["traceEvents"].append(
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": HOST, "tid": 99, "ts": 1.0e6 + 600,
         "dur": 1500.0, "args": {"Input Dims": [[650], [10]], "Input type": ["float", "c10::Half"]}}
    )
    assert parse_trace(doc).allreduces == (AllreduceSample(650 * 4 + 10 * 2, 1.5e-3, "gloo worker thread"),)


def test_device_activity_the_clock_cannot_read_is_named():
    """An accelerator whose work kineto writes under other categories (MTIA, XPU): host clock, and a
    note saying so rather than a quiet host-time profile."""
    doc = _host_only(gpu_trace())
    doc["traceEvents"].append({"ph": "X", "cat": "mtia_runtime", "name": "launch", "pid": HOST, "tid": MAIN, "ts": 1.0e6 + 120, "dur": 3.0})
    trace = parse_trace(doc)
    assert trace.clock == "host" and trace.untimed_device == ("mtia_runtime",)
    assert any("device activity the clock cannot read (mtia_runtime)" in n for n in trace.notes)


# --- without a model ---------------------------------------------------------------------------------


def test_without_a_model_gradients_are_named_by_position_and_shape():
    trace = parse_trace(gpu_trace("1.13"))
    r = profile_from_trace(trace, None, model="job", batch_size=1)
    p = r.profile
    assert p.names == ("grad.000[4x8]", "grad.001[4]", "grad.002[8x8]", "grad.003[8]", "grad.004[8]", "grad.005[8x8]")
    assert [t.bytes for t in p.tensors] == [128, 16, 256, 32, 32, 256]  # elements x 4 ("float")
    assert [t.backward_s for t in p.tensors] == pytest.approx([us * 1e-6 for us in BACKWARD_US], abs=1e-9)
    assert p.forward_s == pytest.approx(FORWARD_US * 1e-6, abs=1e-9) and p.model == "job"
    assert (r.match.by_position, r.match.by_unique_shape, r.match.by_order) == (6, 0, 0)
    assert r.cluster is not None and r.cluster.allreduce.to_json() == TABLE and r.cluster.name == "job-trace"
    assert not any("order differs" in n for n in r.notes)


def test_without_a_model_bytes_come_from_the_input_type():
    doc = gpu_trace()
    for e in _real_grads(doc):
        if e["args"]["Input Dims"] == [[8, 8]]:
            e["args"]["Input type"] = ["c10::Half"]  # 2 bytes per element
        elif e["args"]["Input Dims"] == [[4]]:
            del e["args"]["Input type"]  # no type: float32, with a note
    params, notes = trace_params(parse_trace(doc))
    assert [(q.name, q.bytes) for q in params] == [
        ("grad.000[4x8]", 128), ("grad.001[4]", 16), ("grad.002[8x8]", 128), ("grad.003[8]", 32), ("grad.004[8]", 32), ("grad.005[8x8]", 128)]
    assert notes == ("1 gradient(s) without an 'Input type' in the trace: counted as float32 (4 bytes per element)",)
    for e in _real_grads(doc):
        e["args"]["Input type"] = ["c10::Float4_e2m1fn_x2"]
    with pytest.raises(CommschedError, match=r"gradient grad.000\[4x8\] has an unknown element type 'c10::Float4_e2m1fn_x2'"):
        trace_params(parse_trace(doc))


def test_without_a_model_names_are_zero_padded_to_the_count():
    steps = (TraceStep("ProfilerStep#1", 1e-3, (1e-3,) * 1001, ((3,),) * 1001),)
    params, _ = trace_params(ParsedTrace(steps, (), "host", "cpu", None))
    assert params[0].name == "grad.0000[3]" and params[-1].name == "grad.1000[3]"
    assert len({q.name for q in params}) == 1001


def test_parsing_imports_no_torch():
    code = (
        "import sys, json\n"
        "from commsched.profile.from_trace import load_trace, parse_trace, profile_from_trace, ParamShape\n"
        f"t = parse_trace(load_trace({str(FIXTURE)!r}))\n"
        "ps = [ParamShape(n, tuple(s), b) for n, s, b in "
        f"{[(p.name, p.shape, p.bytes) for p in PARAMS]!r}]\n"
        "profile_from_trace(t, ps, model='m', batch_size=2)\n"
        "profile_from_trace(t, None, model='m', batch_size=2)\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not bad, bad[:5]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


if __name__ == "__main__":  # regenerate the fixture file
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(gpu_trace(), indent=1) + "\n")
