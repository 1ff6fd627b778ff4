"""Measured profiles from a ``torch.profiler`` Chrome trace of the user's own training job.

A user records a few training steps of their job (GPU or CPU) with ``torch.profiler.profile(...,
record_shapes=True, schedule=...)`` and ``prof.step()`` once per step, exports the Chrome trace
(``export_chrome_trace`` or ``tensorboard_trace_handler``) and gets the same ``commsched.profile/v1``
profile that ``profile --measure`` makes, plus, when the job all-reduced, a ``table`` cluster. With a
model commsched has (``--model``) the gradients get its parameter names; without one they are named
by position and shape and their bytes come from the trace (see *Without a model* below).

The parsing (:func:`load_trace`, :func:`parse_trace`, :func:`match_gradients`, :func:`trace_params`,
:func:`profile_from_trace`, :func:`allreduce_cluster`) is plain JSON and never imports torch; only
:func:`zoo_params` and :func:`module_params`, which read the model's parameters, do.

**Which traces.** Read as each exporter writes them (checked against the traces named in
``benchmarks/published_traces.py``):

- torch 2.14's Python exporter (``torch/profiler/_chrome_trace_export.py``) and kineto's C++ one
  since mid-2021: categories ``cpu_op``, ``user_annotation``, ``gpu_user_annotation``, ``kernel``,
  ``gpu_memcpy``, ``gpu_memset``, ``cuda_runtime``, ``cuda_driver``; ``fwdbwd`` and ``ac2g`` flows.
  A ``record_function`` range that launched device work is written twice: on the host thread
  (``user_annotation``) and again over that work on the GPU's row (``gpu_user_annotation``, pid =
  the device) -- ``ProfilerStep#N`` included (kineto of mid-2021 spelled it ``gpu_user_Annotation``).
- kineto before June 2021 (torch 1.8.x): ``Operator`` for every host op (``ProfilerStep#N`` too),
  ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``, ``User`` for the GPU copies of annotations,
  ``async`` launch flows, no autograd-engine events and no ``fwdbwd`` flows.
- Categories are compared without case, the old names mapped to the new (:data:`CATEGORY_ALIASES`).
  Host thread ids may be strings (torch 1.8 writes ``"tid": "25738"``); they are only compared.

Events read:

- **Steps**: ``ProfilerStep#N`` on the host only (``user_annotation``, or ``cpu_op``/``Operator``
  in old traces); their GPU copies are never steps. Every other event belongs to the step whose
  [ts, ts + dur] holds its start (any thread: on a GPU the backward runs in the autograd engine's
  device thread). A trace without host steps is an error: nothing else delimits training steps
  reliably. A step without a backward pass (the profiler stopped just after ``prof.step()`` opened
  it, or an evaluation step) is left out with a note; none left is an error.
- **Backward**: starts at the step's first backward node: an ``autograd::engine::evaluate_function:
  ...`` event (every trace here but torch 1.8's) or a host op whose ``Fwd thread id`` is > 0 (the
  profiler writes a nonzero one only on backward nodes: ``NllLossBackward`` in torch 1.8,
  ``SumBackward0`` inside the engine's event since).
- **Forward**: the ops before the backward that recorded an autograd node, found one of two ways:

  1. ``fwdbwd`` flow starts (``ph: "s"``), which the exporter draws at the forward op of every
     backward node (``generateForwardBackwardLink``, ``torch/csrc/autograd/profiler_kineto.cpp``,
     later ``torch/csrc/profiler/collection.cpp``).
  2. Without those flows -- the torch 1.8 samples have none, some later versions commented the link
     out (a crash workaround) while still writing the args below, and it can be switched off; the 8-
     and 16-rank traces named in the benchmark have none -- the same link from the ops' own args, as
     that function makes it: every backward node of the step carries the ``Sequence number`` of the node;
     its forward op is the latest-starting host op on the step's thread, before the backward, with
     that ``Sequence number`` and ``Fwd thread id`` 0. (Older torch also stamps the next sequence
     number on ops that create no node, e.g. data loading; the latest-starting one with the number is
     the op that created it, which is why the exporter takes it, and why this does.) Only the step's
     thread: sequence numbers count per thread, and ``Fwd thread id`` names the profiler's thread
     index, not the trace's ``tid``.

  The forward starts at the first such op and ends at the end of the last one before the backward
  (the loss's last op); both are widened to the outermost ``cpu_op`` on the same thread that encloses
  them (``aten::conv2d`` around ``aten::convolution``). So ops that record no graph node (data
  loading, zero_grad, DDP's pre-forward work) are left out, and the gap between the loss and the
  engine's first node counts as backward, as in ``profile --measure`` (whose backward starts just
  before ``loss.backward()``). A job that runs other work there (a pipeline distributing the next
  batch's input) has it in ``backward_s[0]``: it is time in which no gradient is ready.
  :attr:`TraceStep.gap_s` says how long it was. Work run between forward ops, before the loss's last
  op, is in ``forward_s`` likewise (the 8-rank trace's pipeline distributes the next batch's input,
  about 10 ms on the host, before ``aten::sum`` of its losses, whose node is the backward's first).
- **Gradients ready**: ``torch::autograd::AccumulateGrad`` host ops (the name has not changed since
  torch 1.8), one per trainable parameter per backward pass; ``register_post_accumulate_grad_hook``
  (what ``--measure`` and DDP use) fires at the end of that op, so a gradient is ready at the op's
  end. ``record_shapes=True`` gives each its ``Input Dims`` (the gradient's shape, the parameter's)
  and ``Input type`` (its element type, ``float`` or ``c10::Half``). One with ``Input type`` ``""``
  (and ``Input Dims`` ``[[]]``) received an undefined gradient -- a node returned None for that
  parameter -- and accumulated nothing (``AccumulateGrad::apply`` returns first thing, in
  ``torch/csrc/autograd/functions/accumulate_grad.cpp``): it is not a gradient and is left out,
  with a note (the 8- and 16-rank traces have two per step).
- **Clock**: on the CPU (no kernels in the trace) host time is compute time. With GPU kernels, host
  ops only launch work, so every host instant t above becomes ``done(t)``: the latest end of the
  device work (kernels, memcpys, memsets; never NCCL's kernels) on the *compute streams* launched
  at or before t -- a kernel is joined to its launch (``cuda_runtime``/``cuda_driver`` event) by
  ``correlation`` -- or t itself if later. That is when the work launched by t has finished on the
  device, which is when an all-reduce launched at t (on NCCL's stream, after the compute stream) can
  start. The compute streams are those that ran work launched by a step's backward nodes (their
  threads, between the backward's start and its last gradient): autograd runs a node's backward on
  its forward op's stream, so they hold the forward too, and work on other streams (a prefetch of the
  next batch's input, an embedding all-to-all's copies) does not hold a gradient back. The forward
  then starts at the device start of the first compute-stream work launched after its host start.
  ``gpu_user_annotation`` rows are never device work.

Per step (docs/design.md, the profile format): ``forward_s`` = forward end - forward start;
``backward_s[0]`` = ready_0 - forward end; ``backward_s[i]`` = ready_i - ready_{i-1}, with ready_i the
end of the i-th AccumulateGrad in time order. The profile takes the median over steps of each, as
``profile --measure`` does (so the sum of the medians is not the median of the sums). Every step must
show the same shape sequence; one that does not (a different graph, two backward passes in a step)
is an error naming it.

**Matching AccumulateGrad events to parameters.** The events carry shapes, not names. The model's
parameters come from a reference run of the same model (:func:`zoo_params`/:func:`module_params`:
names, shapes and bytes in the order their post-accumulate-grad hooks fire, as
:func:`commsched.models.inventory.inventory` observes it). The rule: **the k-th event of shape S in
the trace's step is the k-th parameter of shape S in the reference ready order**. Before matching,
the event count must equal the number of the model's gradient tensors (trainable parameters that
receive a gradient) and every shape must occur as often in a step as in the model; either mismatch
is an error naming the counts or the shape. Parameters whose shape is unique are matched exactly
whatever order the job's backward ran in; parameters that share a shape (ResNet's BatchNorm weights
and biases, say) are matched by their order among themselves, which is the autograd engine's order
for the same graph and so the reference run's -- but a job whose graph orders same-shaped
parameters differently from the reference (a different loss head that changes branch order) would
get their names swapped, which the trace cannot reveal: shapes are all it says. The result reports
how many were matched each way and whether the trace's order is the reference order.

**Without a model** (:func:`trace_params`): the i-th gradient of a step in ready order is named
``grad.<i>[<shape>]`` (``grad.007[1024x4096]``, ``[scalar]`` for 0-d; i zero-padded to the count's
width, at least 3 digits), stable for the same job and readable as what it is. Its bytes are the
shape's element count times the element size of its ``Input type`` (:data:`DTYPE_BYTES`); a trace
without ``Input type`` gets 4 bytes (float32) per element, with a note. Without ``Input Dims``
(``record_shapes=False``) neither names nor bytes can be read: an error saying so.

**All-reduces** become a ``table`` cluster (sizes in bytes, the median time per size):

- GPU: NCCL kernels (names start with ``nccl``: ``ncclDevKernel_...`` since NCCL 2.19,
  ``ncclKernel_...`` before; RCCL keeps the names), timed by their device duration. Which collective
  a kernel ran is read, first to last: the kernel's ``Collective name`` (the exporter copies the
  launching ``record_param_comms`` op's metadata onto it: torch 2.14 does, the 2022-2023 traces named
  in the benchmark predate it), else the innermost host op
  around its launch (same thread, joined by ``correlation``) that names one -- ``record_param_comms``
  with ``Collective name``, ``nccl:<collective>`` (``nccl:all_reduce``), ``c10d::<collective>_`` --
  else the kernel's own name (``..._AllReduce_...``). The host op is preferred to the name: NCCL
  2.12-2.18 launch an all-reduce under the name ``ncclKernel_SendRecv_...`` (seen in the 16-rank
  trace, where every ``nccl:all_reduce`` launched one). Kernels of one host op are one all-reduce
  (first start to last end). Its size, first to last: ``In msg nelems`` x ``dtype`` on the kernel,
  on the ``record_param_comms`` op around its launch (or with the kernel's ``External id``), the
  ``Input Dims`` x ``Input type`` of the ``nccl:all_reduce`` op around it (the only size the 8-rank
  trace has), or of that ``record_param_comms`` op's first tensor. An all-reduce without any is
  left out of the cluster with a note, as is one of zero duration.
- CPU (no NCCL kernels): gloo's ``gloo:all_reduce`` annotations, which span the collective on
  gloo's worker thread (``Input Dims`` x ``Input type``). ``c10d::allreduce_`` and
  ``record_param_comms`` on the calling thread only enqueue the work (tens of microseconds for a
  collective of milliseconds), so their durations are never used.

The worker count is the all-reduces' ``Group size``, else the trace's ``distributedInfo.world_size``
(torch 1.8's traces have neither: no cluster, with a note).
Times per size are made non-decreasing by pooling adjacent violators, and flat below the smallest
size (as ``validate`` builds its table); a trace with all-reduces of a single size gives no cluster
(a table needs two sizes), with a note saying so. A kernel's device time includes waiting for the
slowest rank to arrive.
"""

from __future__ import annotations

import bisect
import gzip
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import Table
from commsched.cost.fit import nondecreasing_points
from commsched.errors import CommschedError
from commsched.formats.io import parse_json, read_bytes
from commsched.report.trace import PRODUCER as COMMSCHED_TRACE
from commsched.types import MAX_BYTES, MAX_SECONDS, ModelProfile, TensorSpec, shown

__all__ = [
    "AllreduceSample",
    "ParamShape",
    "ParsedTrace",
    "TraceMatch",
    "TraceProfile",
    "TraceStep",
    "allreduce_cluster",
    "cluster_doc",
    "factory_params",
    "load_trace",
    "match_gradients",
    "module_params",
    "parse_trace",
    "profile_from_trace",
    "profile_trace_file",
    "trace_label",
    "trace_params",
    "zoo_params",
]

Shape = tuple[int, ...]
Clock = Literal["host", "device"]
ForwardFrom = Literal["fwdbwd flows", "sequence numbers"]
AllreduceSource = Literal["device kernel", "gloo worker thread"]

STEP_PREFIX = "ProfilerStep#"
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
ENGINE_PREFIX = "autograd::engine::evaluate_function:"
PARAM_COMMS = "record_param_comms"
GLOO_ALLREDUCE = "gloo:all_reduce"
NCCL_ALLREDUCE_PREFIXES = ("ncclDevKernel_AllReduce", "ncclKernel_AllReduce")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
HOST_OP_CATEGORIES = ("cpu_op",)
HOST_CATEGORIES = ("user_annotation", "cpu_op")  # host rows (steps, collectives): never gpu_user_annotation
# kineto's category names before "Refactor trace activities" (June 2021, torch 1.8.x writes them:
# libkineto/src/output_json.cpp of then), lowercased, mapped to today's (libkineto/include/ActivityType.h)
CATEGORY_ALIASES = {
    "operator": "cpu_op",
    "runtime": "cuda_runtime",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "user": "gpu_user_annotation",
}
# device activity of other accelerators (names in libkineto/include/ActivityType.h): not timed here
UNTIMED_DEVICE_PREFIXES = ("mtia_", "privateuse1_", "hpu_", "xpu_")
US_PER_S = 1e6  # Chrome trace times are microseconds (dividing rounds 80 us to exactly 8e-05 s)
FLOAT32_BYTES = 4

# Element sizes by the dtype names traces use: c10's ScalarType names (record_param_comms "dtype")
# and the C++ type names of "Input type" (gloo:all_reduce, AccumulateGrad).
DTYPE_BYTES = {
    "Float": 4, "float": 4, "Double": 8, "double": 8, "Half": 2, "c10::Half": 2, "BFloat16": 2,
    "c10::BFloat16": 2, "Long": 8, "long int": 8, "int64_t": 8, "Int": 4, "int": 4, "Short": 2,
    "short int": 2, "Char": 1, "signed char": 1, "Byte": 1, "unsigned char": 1, "Bool": 1, "bool": 1,
    "ComplexFloat": 8, "c10::complex<float>": 8, "ComplexDouble": 16, "c10::complex<double>": 16,
    "Float8_e4m3fn": 1, "c10::Float8_e4m3fn": 1, "Float8_e5m2": 1, "c10::Float8_e5m2": 1,
}


# --- records -------------------------------------------------------------------------------------


def _check_shape(what: str, shape: object) -> Shape:
    if not isinstance(shape, (list, tuple)) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise CommschedError(f"{what} must be a list of non-negative whole dimensions, got {shown(shape)}")
    return tuple(shape)


def _shape_text(shape: Shape) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


@dataclass(frozen=True)
class ParamShape:
    """One gradient tensor of the model: name, shape and bytes (what the trace is matched against)."""

    name: str
    shape: Shape
    bytes: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CommschedError(f"parameter name must be a non-empty string, got {shown(self.name)}")
        object.__setattr__(self, "shape", _check_shape(f"parameter {self.name!r} shape", self.shape))
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or not 0 < self.bytes <= MAX_BYTES:
            raise CommschedError(f"parameter {self.name!r} bytes must be a whole number in [1, 2**50], got {shown(self.bytes)}")


@dataclass(frozen=True)
class TraceStep:
    """One ``ProfilerStep#``: forward time and each gradient's ready time after the forward's end
    (= backward start), in the order the gradients became ready, with their shapes and element types
    (``Input type``, "" where the trace has none). ``gap_s``: host time from the forward's end to the
    backward's first node (part of ``ready_s[0]``)."""

    name: str
    forward_s: float
    ready_s: tuple[float, ...]
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...] = ()
    gap_s: float = 0.0

    def __post_init__(self) -> None:
        if len(self.ready_s) != len(self.shapes):
            raise CommschedError(f"step {self.name}: {len(self.ready_s)} ready times for {len(self.shapes)} shapes")
        if not self.dtypes:
            object.__setattr__(self, "dtypes", ("",) * len(self.shapes))
        if len(self.dtypes) != len(self.shapes):
            raise CommschedError(f"step {self.name}: {len(self.dtypes)} element types for {len(self.shapes)} shapes")
        for what, v in (("forward_s", self.forward_s), ("gap_s", self.gap_s), *(("ready_s", r) for r in self.ready_s)):
            if not math.isfinite(v) or not 0 <= v <= MAX_SECONDS:
                raise CommschedError(f"step {self.name}: {what} must be in [0, {MAX_SECONDS:g}] seconds, got {shown(v)}")


@dataclass(frozen=True)
class AllreduceSample:
    """One all-reduce of the trace: its bytes and duration, and where the duration was read."""

    bytes: int
    duration_s: float
    source: AllreduceSource
    group_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or not 0 < self.bytes <= MAX_BYTES:
            raise CommschedError(f"all-reduce bytes must be a whole number in [1, 2**50], got {shown(self.bytes)}")
        if not math.isfinite(self.duration_s) or not 0 < self.duration_s <= MAX_SECONDS:
            raise CommschedError(
                f"all-reduce of {self.bytes} bytes: duration must be in (0, {MAX_SECONDS:g}] seconds, got {shown(self.duration_s)}"
            )


@dataclass(frozen=True)
class ParsedTrace:
    """What a trace says, before it is matched to a model. ``forward_from``: how the forward ops were
    found (module docs); ``skipped_steps``: steps without a backward pass, left out;
    ``allreduces_left_out``: NCCL all-reduces without a readable size or with zero duration;
    ``undefined_gradients``: AccumulateGrad events with an undefined gradient, left out (all steps);
    ``untimed_device``: categories of device activity the clock cannot read (MTIA, privateuse1)."""

    steps: tuple[TraceStep, ...]
    allreduces: tuple[AllreduceSample, ...]
    clock: Clock
    device: str
    world_size: int | None
    forward_from: ForwardFrom = "fwdbwd flows"
    skipped_steps: tuple[str, ...] = ()
    allreduces_left_out: int = 0
    undefined_gradients: int = 0
    untimed_device: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.steps:
            raise CommschedError("a parsed trace needs at least one step")

    @property
    def notes(self) -> tuple[str, ...]:
        """What the parse left out or inferred, one line each."""
        out = []
        if self.forward_from == "sequence numbers":
            out.append(
                "the trace has no fwdbwd flow events: forward ops found from their 'Sequence number' args, "
                "as torch's exporter links them"
            )
        if self.untimed_device and self.clock == "host":
            out.append(
                f"the trace has device activity the clock cannot read ({', '.join(self.untimed_device)}): times are the "
                f"host's, which only launched that work"
            )
        if self.skipped_steps:
            out.append(
                f"{len(self.skipped_steps)} step(s) without a backward pass left out: {', '.join(self.skipped_steps[:5])}"
                + (" ..." if len(self.skipped_steps) > 5 else "")
            )
        if self.undefined_gradients:
            out.append(
                f"{self.undefined_gradients} AccumulateGrad event(s) with an undefined gradient ('Input type' \"\") left "
                f"out over {len(self.steps)} step(s): a node returned no gradient for that parameter"
            )
        if self.allreduces_left_out:
            out.append(
                f"{self.allreduces_left_out} NCCL all-reduce(s) left out of the cluster: no readable size ('In msg "
                f"nelems' and 'dtype', or 'Input Dims' and 'Input type' on the ops that launched them) or no duration"
            )
        return tuple(out)


@dataclass(frozen=True)
class TraceMatch:
    """Parameter names of the trace's gradients, in the trace's ready order, and how they were matched."""

    names: tuple[str, ...]
    by_unique_shape: int  # gradients whose shape no other gradient of the model has
    by_order: int  # gradients matched among same-shaped ones by their order (see the module docs)
    reference_order: bool  # the trace's order equals the reference run's
    by_position: int = 0  # gradients named by their position and shape (no model: trace_params)

    def __post_init__(self) -> None:
        if self.by_unique_shape + self.by_order + self.by_position != len(self.names):
            raise CommschedError(
                f"match counts {self.by_unique_shape} + {self.by_order} + {self.by_position} != {len(self.names)} names"
            )


@dataclass(frozen=True)
class TraceProfile:
    """A profile measured from a trace, the all-reduce table cluster (None without one) and notes."""

    profile: ModelProfile
    cluster: ClusterSpec | None
    match: TraceMatch
    steps: int
    clock: Clock
    allreduces: tuple[AllreduceSample, ...]
    notes: tuple[str, ...] = ()


# --- reading -------------------------------------------------------------------------------------


def load_trace(path: str | Path) -> dict:
    """A Chrome trace file (``.json`` or gzip-compressed, as ``tensorboard_trace_handler`` writes it)."""
    p = Path(path)
    raw = read_bytes(p, "a Chrome trace JSON file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise CommschedError(f"{p}: corrupt gzip data ({e})") from None
    doc = parse_json(raw, p, "a Chrome trace JSON file")
    _check_chrome_trace(doc, str(p))
    return doc


def _check_chrome_trace(doc: object, where: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        got = f"an object with keys {sorted(doc)[:5]}" if isinstance(doc, dict) else type(doc).__name__
        raise CommschedError(f"{where}: not a Chrome trace (expected an object with a 'traceEvents' list), got {got}")


@dataclass(frozen=True)
class _Event:
    """A complete ('X') event, times in microseconds, category normalised (:func:`_category`)."""

    name: str
    cat: str
    pid: Any
    tid: Any
    ts: float
    dur: float
    args: dict

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def thread(self) -> tuple[Any, Any]:
        return (self.pid, self.tid)

    @property
    def host_op(self) -> bool:
        return self.cat in HOST_OP_CATEGORIES


def _category(cat: object) -> str:
    c = str(cat).lower() if cat is not None else ""
    return CATEGORY_ALIASES.get(c, c)


def _events(doc: dict, where: str) -> tuple[list[_Event], list[tuple[float, Any, Any]]]:
    """Complete events sorted by start, and fwdbwd flow starts as (ts, pid, tid)."""
    complete: list[_Event] = []
    flows: list[tuple[float, Any, Any]] = []
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise CommschedError(f"{where}: traceEvents[{i}] is not an object: {shown(e)}")
        ph = e.get("ph")
        if ph not in ("X", "s"):
            continue
        ts = e.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise CommschedError(f"{where}: traceEvents[{i}] ({shown(e.get('name'))}) has no numeric 'ts': {shown(ts)}")
        if ph == "s":
            if e.get("cat") == "fwdbwd":
                flows.append((float(ts), e.get("pid"), e.get("tid")))
            continue
        dur = e.get("dur", 0)
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
            raise CommschedError(f"{where}: traceEvents[{i}] ({shown(e.get('name'))}) has a bad 'dur': {shown(dur)}")
        args = e.get("args")
        complete.append(
            _Event(str(e.get("name", "")), _category(e.get("cat")), e.get("pid"), e.get("tid"), float(ts), float(dur),
                   args if isinstance(args, dict) else {})
        )
    complete.sort(key=lambda ev: ev.ts)
    flows.sort(key=lambda f: f[0])
    return complete, flows


def _int_arg(e: _Event, key: str) -> int | None:
    v = e.args.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _is_backward_node(e: _Event) -> bool:
    """An autograd engine node: its engine event, or (torch 1.8, no engine events) the node's own op,
    the only ops the profiler gives a ``Fwd thread id`` > 0."""
    if not e.host_op:
        return False
    return e.name.startswith(ENGINE_PREFIX) or (_int_arg(e, "Fwd thread id") or 0) > 0


# --- device clock ----------------------------------------------------------------------------------


def _launches(events: list[_Event]) -> dict[Any, _Event]:
    """Launch events (``cuda_runtime``/``cuda_driver``) by their ``correlation``."""
    return {e.args["correlation"]: e for e in events if e.cat in LAUNCH_CATEGORIES and e.args.get("correlation") is not None}


def _device_work(events: list[_Event], launches: dict[Any, _Event]) -> list[tuple[_Event, _Event]]:
    """(launch, work) for every kernel, memcpy and memset that is not NCCL's, with a known launch."""
    out = []
    for e in events:
        if e.cat in DEVICE_CATEGORIES and not e.name.lower().startswith("nccl"):
            launch = launches.get(e.args.get("correlation"))
            if launch is not None:
                out.append((launch, e))
    return out


class _DeviceClock:
    """``done(t)``: when the compute-stream work launched by host time t has finished (t itself on the CPU)."""

    def __init__(self, work: list[tuple[_Event, _Event]], streams: set[tuple[Any, Any]] | None = None) -> None:
        chosen = sorted(
            (launch.ts, w.ts, w.end) for launch, w in work if streams is None or (w.pid, w.tid) in streams
        )
        self.launch_ts = [w[0] for w in chosen]
        self.starts = [w[1] for w in chosen]
        self.prefix_end: list[float] = []
        for _, _, end in chosen:
            self.prefix_end.append(max(end, self.prefix_end[-1]) if self.prefix_end else end)

    @property
    def on_device(self) -> bool:
        return bool(self.launch_ts)

    def done(self, t: float) -> float:
        k = bisect.bisect_right(self.launch_ts, t)
        return max(t, self.prefix_end[k - 1]) if k else t

    def started(self, t: float, until: float) -> float:
        """Device start of the first work launched in [t, until]; t if none (CPU)."""
        k = bisect.bisect_left(self.launch_ts, t)
        if k < len(self.launch_ts) and self.launch_ts[k] <= until:
            return min(self.starts[k:bisect.bisect_right(self.launch_ts, until)])
        return t


# --- parsing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HostStep:
    """A step's host instants (us), before the device clock: forward span, backward start, and per
    gradient (in end order) its AccumulateGrad's end, shape and element type."""

    name: str
    forward_start: float
    forward_end: float
    backward_start: float
    backward_end: float
    backward_threads: frozenset
    ready: tuple[float, ...]
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    forward_from: ForwardFrom
    undefined: int  # AccumulateGrad events with an undefined gradient, left out


def parse_trace(doc: object, where: str = "trace") -> ParsedTrace:
    """Steps (forward time, gradient ready times and shapes) and all-reduces of a Chrome trace.

    See the module docstring for which events are read and how; every malformed or missing piece
    is a CommschedError naming ``where`` and the step or event.
    """
    _check_chrome_trace(doc, where)
    assert isinstance(doc, dict)
    other = doc.get("otherData")
    if isinstance(other, dict) and other.get("producer") == COMMSCHED_TRACE:
        written = "validate's measured-trace.json" if other.get("timeline") == "measured" else "the trace.json `plan` writes"
        raise CommschedError(
            f"{where} is a timeline commsched wrote ({written}), not a torch.profiler trace of a job: "
            "record a few steps of your own job with torch.profiler (docs/cli.md, profile)"
        )
    events, flows = _events(doc, where)
    steps = [e for e in events if e.name.startswith(STEP_PREFIX) and e.cat in HOST_CATEGORIES]
    if not steps:
        raise CommschedError(
            f"{where}: no {STEP_PREFIX}N annotation on a host thread; record with torch.profiler.profile(schedule=...) "
            f"and call prof.step() once per training step"
        )
    for a, b in zip(steps, steps[1:]):
        if b.ts < a.end:
            raise CommschedError(f"{where}: steps {a.name} and {b.name} overlap")
    starts = [e.ts for e in events]
    host_steps, skipped = [], []
    for s in steps:
        hs = _host_step(s, events[bisect.bisect_left(starts, s.ts):bisect.bisect_right(starts, s.end)], flows, where)
        if hs is None:
            skipped.append(s.name)
        else:
            host_steps.append(hs)
    if not host_steps:
        raise CommschedError(
            f"{where}: none of the {len(steps)} steps has a backward pass (no '{ENGINE_PREFIX} ...' event, no op with "
            f"a 'Fwd thread id' > 0)"
        )
    launches = _launches(events)
    work = _device_work(events, launches)
    clock = _DeviceClock(work, _compute_streams(work, host_steps) or None)
    parsed = tuple(_timed_step(h, clock) for h in host_steps)
    allreduces, left_out = _allreduces(events, launches, where)
    world = doc.get("distributedInfo", {}).get("world_size") if isinstance(doc.get("distributedInfo"), dict) else None
    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise CommschedError(f"{where}: distributedInfo.world_size must be a positive integer, got {shown(world)}")
    forward_from = "sequence numbers" if any(h.forward_from == "sequence numbers" for h in host_steps) else "fwdbwd flows"
    return ParsedTrace(
        parsed, allreduces, "device" if clock.on_device else "host", _device_name(doc, events), world,
        forward_from, tuple(skipped), left_out, sum(h.undefined for h in host_steps),
        tuple(sorted({e.cat for e in events if e.cat.startswith(UNTIMED_DEVICE_PREFIXES)})),
    )


def _outermost(events: list[_Event], starts: list[float], at: float, thread: tuple[Any, Any], lo: float) -> _Event | None:
    """The outermost host op on ``thread`` that starts in [lo, at] and encloses instant ``at``
    (``events`` sorted by start, ``starts`` their starts)."""
    k = bisect.bisect_right(starts, at)
    best = None
    for e in events[:k][::-1]:
        if e.ts < lo:
            break
        if e.host_op and e.thread == thread and e.ts <= at <= e.end:
            best = e
    return best


def _forward_anchors(
    step: _Event, inside: list[_Event], flows: list[tuple[float, Any, Any]], nodes: list[_Event], backward_start: float, where: str
) -> tuple[list[tuple[float, tuple[Any, Any]]], ForwardFrom]:
    """The step's forward ops that recorded a backward node, as (start, thread), in time order, and how
    they were found (module docs: fwdbwd flows, else the ops' sequence numbers)."""
    in_step = [(f[0], (f[1], f[2])) for f in flows if step.ts <= f[0] < backward_start]
    if in_step:
        return in_step, "fwdbwd flows"
    wanted = {seq for n in nodes if (seq := _int_arg(n, "Sequence number")) is not None}
    latest: dict[int, _Event] = {}
    for e in inside:
        if e.ts >= backward_start:
            break
        if not e.host_op or e.thread != step.thread or (_int_arg(e, "Fwd thread id") or 0) != 0:
            continue
        seq = _int_arg(e, "Sequence number")
        if seq in wanted and (seq not in latest or e.ts >= latest[seq].ts):
            latest[seq] = e
    if not latest:
        raise CommschedError(
            f"{where}: step {step.name} has no forward op before its backward: no 'fwdbwd' flow event, and no op on "
            f"the step's thread with the 'Sequence number' of a backward node; the trace must come from "
            f"torch.profiler's Chrome export"
        )
    return sorted((e.ts, e.thread) for e in latest.values()), "sequence numbers"


def _host_step(step: _Event, window: list[_Event], flows: list[tuple[float, Any, Any]], where: str) -> _HostStep | None:
    """One step's host instants from the events that start inside it (``window``, sorted by start);
    None for a step without a backward pass."""
    inside = [e for e in window if e is not step]
    starts = [e.ts for e in inside]
    nodes = [e for e in inside if _is_backward_node(e)]
    if not nodes:
        return None
    backward_start = nodes[0].ts
    anchors, forward_from = _forward_anchors(step, inside, flows, nodes, backward_start, where)
    (first_ts, first_thread), (last_ts, last_thread) = anchors[0], anchors[-1]
    first_op = _outermost(inside, starts, first_ts, first_thread, step.ts)
    last_op = _outermost(inside, starts, last_ts, last_thread, step.ts)
    fwd_start = first_op.ts if first_op else first_ts
    fwd_end = max(last_op.end if last_op else last_ts, fwd_start)
    fwd_end = min(fwd_end, backward_start)  # an op enclosing the engine (a user annotation) is not the loss

    grads = [e for e in inside if e.host_op and e.name == ACCUMULATE_GRAD and e.ts >= backward_start]
    undefined = sum(1 for g in grads if _undefined_gradient(g))
    grads = [g for g in grads if not _undefined_gradient(g)]
    if not grads:
        raise CommschedError(f"{where}: step {step.name} has no '{ACCUMULATE_GRAD}' event: no gradient became ready")
    shapes, dtypes = [], []
    for g in grads:
        dims = g.args.get("Input Dims")
        if not isinstance(dims, list) or not dims:
            raise CommschedError(
                f"{where}: step {step.name}: '{ACCUMULATE_GRAD}' at ts={g.ts:.3f} us has no 'Input Dims'; record the "
                f"trace with torch.profiler.profile(record_shapes=True)"
            )
        shapes.append(_check_shape(f"{where}: step {step.name}: '{ACCUMULATE_GRAD}' Input Dims[0]", dims[0]))
        types = g.args.get("Input type")
        dtypes.append(types[0] if isinstance(types, list) and types and isinstance(types[0], str) else "")
    order = sorted(range(len(grads)), key=lambda i: (grads[i].end, i))
    return _HostStep(
        step.name, fwd_start, fwd_end, backward_start, grads[order[-1]].end,
        frozenset(n.thread for n in nodes), tuple(grads[i].end for i in order), tuple(shapes[i] for i in order),
        tuple(dtypes[i] for i in order), forward_from, undefined,
    )


def _undefined_gradient(g: _Event) -> bool:
    """An AccumulateGrad called with an undefined gradient: the profiler types it "" (module docs)."""
    types = g.args.get("Input type")
    return isinstance(types, list) and types[:1] == [""]


def _compute_streams(work: list[tuple[_Event, _Event]], steps: list[_HostStep]) -> set[tuple[Any, Any]]:
    """The (device, stream) rows that ran work launched by a step's backward nodes: from their
    threads, between the backward's start and its last gradient (module docs, *Clock*)."""
    out = set()
    for launch, w in work:
        for s in steps:
            if launch.thread in s.backward_threads and s.backward_start <= launch.ts <= s.backward_end:
                out.add((w.pid, w.tid))
                break
    return out


def _timed_step(h: _HostStep, clock: _DeviceClock) -> TraceStep:
    device_start = clock.started(h.forward_start, h.forward_end)
    backward_start = clock.done(h.forward_end)
    return TraceStep(
        h.name,
        (backward_start - device_start) / US_PER_S,
        tuple(max(clock.done(r) - backward_start, 0.0) / US_PER_S for r in h.ready),
        h.shapes,
        h.dtypes,
        max(h.backward_start - h.forward_end, 0.0) / US_PER_S,
    )


def _device_name(doc: dict, events: list[_Event]) -> str:
    kernel_pids = {e.pid for e in events if e.cat == "kernel"}
    if not kernel_pids:
        return "cpu"
    props = doc.get("deviceProperties")
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and p.get("id") in kernel_pids and isinstance(p.get("name"), str) and p["name"]:
                return p["name"]
    return "cuda"


# --- all-reduces ---------------------------------------------------------------------------------


def _nelems_bytes(args: dict) -> int | None:
    """``In msg nelems`` x ``dtype`` (record_param_comms metadata), or None if either is missing or unreadable."""
    n, dtype = args.get("In msg nelems"), args.get("dtype")
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0 or dtype not in DTYPE_BYTES:
        return None
    return n * DTYPE_BYTES[dtype]


def _dims_bytes(args: dict, first_only: bool = False) -> int | None:
    """Bytes of the tensors in ``Input Dims`` x ``Input type`` (those of a known element type), or None."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    total = 0
    for d, t in zip(dims, types):
        if t in DTYPE_BYTES and isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d):
            total += math.prod(d) * DTYPE_BYTES[t]
            if first_only:
                break
    return total or None


def _group_size(args: dict, where: str) -> int | None:
    g = args.get("Group size")
    if g is None:
        return None
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise CommschedError(f"{where}: all-reduce 'Group size' must be a positive integer, got {shown(g)}")
    return g


def _collective(op: _Event) -> str | None:
    """The collective a host op names (``record_param_comms``' ``Collective name``, ``nccl:<c>``,
    ``c10d::<c>_``), or None."""
    if op.name == PARAM_COMMS:
        c = op.args.get("Collective name")
        return c if isinstance(c, str) and c else None
    if op.name.startswith("nccl:"):
        return op.name[len("nccl:"):]
    if op.name.startswith("c10d::"):
        return op.name[len("c10d::"):].rstrip("_")
    return None


def _is_allreduce(collective: str) -> bool:
    return collective.lower().replace("_", "") == "allreduce"


class _CommOps:
    """The host ops that can name a collective, per thread, to find those around an instant."""

    def __init__(self, events: list[_Event]) -> None:
        self.by_thread: dict[tuple[Any, Any], list[_Event]] = defaultdict(list)
        self.by_external_id: dict[Any, _Event] = {}
        for e in events:
            if e.cat in HOST_CATEGORIES and (e.name == PARAM_COMMS or e.name.startswith(("nccl:", "c10d::"))):
                self.by_thread[e.thread].append(e)
                if e.name == PARAM_COMMS and e.args.get("External id") is not None:
                    self.by_external_id[e.args["External id"]] = e
        self.starts = {k: [e.ts for e in v] for k, v in self.by_thread.items()}
        # the longest op per thread bounds how far back an op around an instant can start
        self.longest = {k: max(e.dur for e in v) for k, v in self.by_thread.items()}

    def around(self, launch: _Event) -> list[_Event]:
        """Ops on the launch's thread whose span holds its start, innermost (latest start) first."""
        ops, starts = self.by_thread.get(launch.thread), self.starts.get(launch.thread)
        if not ops:
            return []
        k = bisect.bisect_right(starts, launch.ts)
        lo = bisect.bisect_left(starts, launch.ts - self.longest[launch.thread])
        return [e for e in reversed(ops[lo:k]) if e.end >= launch.ts]


def _allreduces(events: list[_Event], launches: dict[Any, _Event], where: str) -> tuple[tuple[AllreduceSample, ...], int]:
    """The trace's all-reduces, and how many NCCL ones were left out (no size or no duration)."""
    kernels = [e for e in events if e.cat == "kernel" and e.name.lower().startswith("nccl")]
    if not kernels:
        return _gloo_allreduces(events, where), 0
    comm = _CommOps(events)
    groups: dict[int, list] = {}  # one all-reduce per launching host op (else per kernel)
    for k in kernels:
        launch = launches.get(k.args.get("correlation"))
        around = comm.around(launch) if launch is not None else []
        linked = comm.by_external_id.get(k.args.get("External id"))
        if launch is None and linked is not None and _collective(linked) is not None:
            # no launch in the trace: the exporter's link, a kernel's External id being its op's (older
            # traces set it to the kernel's correlation, and their record_param_comms name no collective)
            around = [linked]
        named = next(((op, c) for op in around if (c := _collective(op)) is not None), None)
        if isinstance(k.args.get("Collective name"), str):
            collective = k.args["Collective name"]
        elif named is not None:
            collective = named[1]
        else:
            collective = "allreduce" if k.name.startswith(NCCL_ALLREDUCE_PREFIXES) else ""
        if not _is_allreduce(collective):
            continue
        key = id(named[0]) if named is not None else id(k)
        groups.setdefault(key, [k, around, []])[2].append(k)
    out, left_out = [], 0
    for first, around, ks in groups.values():
        what = f"{where}: kernel {first.name[:60]!r} at ts={first.ts:.3f} us"
        nbytes = _nelems_bytes(first.args)
        group = _group_size(first.args, what)
        for op in around:  # innermost first
            if nbytes is None and op.name == PARAM_COMMS:
                nbytes = _nelems_bytes(op.args)
            if group is None and op.name == PARAM_COMMS:
                group = _group_size(op.args, what)
        for op in around:
            if nbytes is None and op.name.startswith("nccl:"):
                nbytes = _dims_bytes(op.args)
        for op in around:
            if nbytes is None and op.name == PARAM_COMMS:
                nbytes = _dims_bytes(op.args, first_only=True)
        span = max(k.end for k in ks) - min(k.ts for k in ks)
        if nbytes is None or span <= 0:
            left_out += 1
            continue
        out.append(AllreduceSample(nbytes, span / US_PER_S, "device kernel", group))
    return tuple(out), left_out


def _gloo_allreduces(events: list[_Event], where: str) -> tuple[AllreduceSample, ...]:
    out = []
    for e in events:
        if e.name != GLOO_ALLREDUCE:
            continue
        what = f"{where}: '{GLOO_ALLREDUCE}' at ts={e.ts:.3f} us"
        dims, types = e.args.get("Input Dims"), e.args.get("Input type")
        if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types) or not dims:
            raise CommschedError(f"{what} has no 'Input Dims'/'Input type'; record with record_shapes=True")
        nbytes = 0
        for d, t in zip(dims, types):
            if t not in DTYPE_BYTES:
                raise CommschedError(f"{what}: unknown element type {shown(t)}")
            nbytes += math.prod(_check_shape(f"{what} Input Dims", d)) * DTYPE_BYTES[t]
        if nbytes <= 0 or e.dur <= 0:
            continue  # an empty all-reduce (DDP's zero-size probes) says nothing about cost
        out.append(AllreduceSample(nbytes, e.dur / US_PER_S, "gloo worker thread"))
    return tuple(out)


# --- matching ------------------------------------------------------------------------------------


def match_gradients(shapes: Sequence[Shape], params: Sequence[ParamShape], model: str = "model", step: str = "") -> TraceMatch:
    """Names for a step's gradient shapes (in ready order): the k-th gradient of shape S is the k-th
    parameter of shape S in ``params`` (the reference ready order). Counts and shapes must agree."""
    where = f"step {step}: " if step else ""
    if len(shapes) != len(params):
        raise CommschedError(
            f"{where}the trace has {len(shapes)} AccumulateGrad events per step but model {model!r} has {len(params)} "
            f"gradient tensors (trainable parameters that receive a gradient); is it the same model, with one backward "
            f"pass per step?"
        )
    have, want = Counter(shapes), Counter(p.shape for p in params)
    if have != want:
        bad = next(s for s in [*want, *have] if have[s] != want[s])
        raise CommschedError(
            f"{where}gradient shapes do not match model {model!r}: shape {_shape_text(bad)} occurs {have[bad]} times "
            f"in the trace's step and {want[bad]} times among the model's gradient tensors"
        )
    queues: dict[Shape, list[str]] = defaultdict(list)
    for p in params:
        queues[p.shape].append(p.name)
    taken: Counter[Shape] = Counter()
    names = []
    for s in shapes:
        names.append(queues[s][taken[s]])
        taken[s] += 1
    unique = sum(1 for s in shapes if want[s] == 1)
    return TraceMatch(tuple(names), unique, len(shapes) - unique, tuple(names) == tuple(p.name for p in params))


def trace_params(trace: ParsedTrace) -> tuple[tuple[ParamShape, ...], tuple[str, ...]]:
    """Without a model: the first step's gradients named by position and shape (``grad.007[64x3x7x7]``),
    bytes = elements x the ``Input type``'s element size (4 where the trace has no type), and notes."""
    step = trace.steps[0]
    width = max(3, len(str(len(step.shapes) - 1)))
    params, untyped = [], 0
    for i, (shape, dtype) in enumerate(zip(step.shapes, step.dtypes)):
        name = f"grad.{i:0{width}d}[{_shape_text(shape)}]"
        if dtype == "":
            untyped += 1
            size = FLOAT32_BYTES
        elif dtype in DTYPE_BYTES:
            size = DTYPE_BYTES[dtype]
        else:
            raise CommschedError(f"step {step.name}: gradient {name} has an unknown element type {shown(dtype)} ('Input type')")
        params.append(ParamShape(name, shape, math.prod(shape) * size))
    notes = (f"{untyped} gradient(s) without an 'Input type' in the trace: counted as float32 (4 bytes per element)",) if untyped else ()
    return tuple(params), notes


# --- profile and cluster -----------------------------------------------------------------------------


def profile_from_trace(
    trace: ParsedTrace,
    params: Sequence[ParamShape] | None,
    *,
    model: str,
    batch_size: int,
    device: str | None = None,
    trace_name: str = "trace",
) -> TraceProfile:
    """The measured profile (medians over the trace's steps) and, with all-reduces, the table cluster.
    ``params=None``: no model; the gradients are named and sized from the trace (:func:`trace_params`)."""
    notes = list(trace.notes)
    first = trace.steps[0]
    if params is None:
        params, more = trace_params(trace)
        notes.extend(more)
        match = TraceMatch(tuple(p.name for p in params), 0, 0, True, by_position=len(params))
    else:
        if not params:
            raise CommschedError(f"model {model!r} has no gradient tensors to match the trace against")
        match = match_gradients(first.shapes, params, model, first.name)
    for s in trace.steps[1:]:
        if s.shapes != first.shapes:
            pos = next((i for i, (a, b) in enumerate(zip(first.shapes, s.shapes)) if a != b), min(len(first.shapes), len(s.shapes)))
            raise CommschedError(
                f"{trace_name}: gradient-ready order changed between steps: position {pos} has shape "
                f"{_shape_text(first.shapes[pos]) if pos < len(first.shapes) else 'none'} in {first.name} and "
                f"{_shape_text(s.shapes[pos]) if pos < len(s.shapes) else 'none'} in {s.name} (every step must run the same backward graph)"
            )
    by_name = {p.name: p for p in params}
    tensors = []
    for i, name in enumerate(match.names):
        deltas = [s.ready_s[i] - (s.ready_s[i - 1] if i else 0.0) for s in trace.steps]
        tensors.append(TensorSpec(name, by_name[name].bytes, max(statistics.median(deltas), 0.0)))
    profile = ModelProfile(
        model=model,
        batch_size=batch_size,
        device=device or trace.device,
        source="measured",
        forward_s=statistics.median(s.forward_s for s in trace.steps),
        tensors=tuple(tensors),
    )
    if not match.reference_order:
        notes.append("the trace's gradient order differs from the reference run's (matched by shape, see docs)")
    cluster, note = allreduce_cluster(trace, f"{model}-trace", trace_name)
    if note:
        notes.append(note)
    return TraceProfile(profile, cluster, match, len(trace.steps), trace.clock, trace.allreduces, tuple(notes))


def allreduce_cluster(trace: ParsedTrace, name: str = "trace", trace_name: str = "trace") -> tuple[ClusterSpec | None, str]:
    """A ``table`` cluster of the trace's all-reduces (median time per size), or None and why not."""
    samples = trace.allreduces
    if not samples:
        return None, "no all-reduce in the trace: no cluster"
    groups = {s.group_size for s in samples if s.group_size is not None}
    if len(groups) > 1:
        raise CommschedError(
            f"{trace_name}: all-reduces of process groups of different sizes ({', '.join(map(str, sorted(groups)))}); "
            f"a cluster has one worker count"
        )
    workers = groups.pop() if groups else trace.world_size
    if workers is None:  # torch 1.8 wrote no distributedInfo: the profile stands without a cluster
        return None, (
            f"{len(samples)} all-reduces but no worker count (no 'Group size' on them, no distributedInfo.world_size "
            f"in the trace): no cluster"
        )
    by_size: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_size[s.bytes].append(s.duration_s)
    sizes = sorted(by_size)
    source = samples[0].source
    if len(sizes) < 2:
        return None, f"all {len(samples)} all-reduces in the trace move {sizes[0]} bytes: a table needs two sizes, no cluster"
    medians = [statistics.median(by_size[b]) for b in sizes]
    table = Table(*nondecreasing_points(sizes, medians))
    what = "NCCL kernel durations on the device" if source == "device kernel" else "gloo:all_reduce durations on gloo's worker threads"
    cluster = ClusterSpec(
        name=name,
        workers=workers,
        allreduce=table,
        source=(
            f"torch.profiler trace {trace_name}: {len(samples)} all-reduces of {len(sizes)} sizes, median of the "
            f"{what} per size, made non-decreasing (adjacent violators pooled) and flat below the smallest"
        ),
    )
    return cluster, ""


def cluster_doc(result: TraceProfile) -> dict | None:
    """The cluster JSON with the raw per-size samples beside the table (the cluster schema allows extra keys)."""
    if result.cluster is None:
        return None
    by_size: dict[int, list[float]] = defaultdict(list)
    for s in result.allreduces:
        by_size[s.bytes].append(s.duration_s)
    doc = result.cluster.to_json()
    doc["time_source"] = result.allreduces[0].source
    doc["samples"] = [
        {"bytes": b, "count": len(v), "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
        for b, v in sorted(by_size.items())
    ]
    return doc


def trace_label(path: str | Path) -> str:
    """The profile's name for a trace given without a model: the file's name less its trace
    suffixes (``rank-0.pt.trace.json.gz`` -> ``rank-0``), else ``trace``."""
    return Path(path).name.removesuffix(".gz").removesuffix(".json").removesuffix(".pt.trace") or "trace"


def profile_trace_file(
    path: str | Path, model: str | None = None, batch_size: int | None = None, device: str | None = None,
    image_size: int | None = None,
) -> tuple[TraceProfile, dict | None]:
    """``commsched profile --from-trace``: the profile measured from the Chrome trace at ``path``
    and the document of its all-reduce table cluster (None when the trace has no table, see
    :func:`allreduce_cluster`); nothing is written.

    With zoo ``model`` the gradients get that model's names (:func:`zoo_params`, at
    ``image_size``), with an import path ``package.module:factory`` the names of the model the
    factory builds (:func:`factory_params`); without one they are named by position and shape
    (:func:`trace_params`) and the profile is named after the file (:func:`trace_label`).
    ``batch_size`` None records batch 1, a label only (the times are the traced steps' own);
    ``device`` None takes the trace's. A bad trace or an unknown model fails before torch is imported."""
    from commsched.models.names import ZOO_MODELS, is_import_path

    factory = model is not None and is_import_path(model)
    if model is not None and not factory and model not in ZOO_MODELS:
        raise CommschedError(f"unknown model {model!r}; choose from {', '.join(ZOO_MODELS)}, or give package.module:factory")
    if model is None and image_size is not None:
        raise CommschedError(f"an image size ({image_size}) goes with a model: without one the gradients' shapes come from the trace")
    trace = parse_trace(load_trace(path), str(path))
    if model is None:
        params = None
    else:
        params = factory_params(model, image_size) if factory else zoo_params(model, image_size)
    result = profile_from_trace(trace, params, model=model if model is not None else trace_label(path),
                                batch_size=1 if batch_size is None else batch_size, device=device, trace_name=Path(path).name)
    return result, cluster_doc(result)


# --- the model's parameters (torch) ----------------------------------------------------------------


def module_params(module: Any, example_inputs: Any, loss_fn: Any = None, name: str = "model") -> tuple[ParamShape, ...]:
    """``module``'s gradient tensors in the order a real backward makes them ready (one step of
    :func:`commsched.models.inventory.inventory` on ``example_inputs``, positional or by keyword),
    with shapes from ``named_parameters``."""
    from commsched.models.inventory import inventory

    inv = inventory(module, example_inputs, loss_fn=loss_fn, name=name)
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    return tuple(ParamShape(t.name, shapes[t.name], t.bytes) for t in inv.tensors)


def factory_params(spec: str, image_size: int | None = None) -> tuple[ParamShape, ...]:
    """The gradient tensors (:func:`module_params`) of the model ``package.module:factory`` builds
    (:func:`commsched.models.source.build`, with 2 samples and ``image_size`` where it takes them:
    names and shapes do not depend on the batch), one CPU step on its own example inputs and loss,
    the generators seeded and restored after."""
    from commsched.models.source import build, forked_rng, runs_on
    from commsched.profile.zoo_profile import INVENTORY_BATCH

    with forked_rng():
        built = build(spec, INVENTORY_BATCH, image_size)
        with runs_on(spec, built.inputs):
            return module_params(built.model, built.inputs, built.loss_fn, name=spec)


def zoo_params(name: str, image_size: int | None = None) -> tuple[ParamShape, ...]:
    """Zoo model ``name``'s gradient tensors in reference ready order, shapes and bytes (on torch's
    meta device: no values computed, see :mod:`commsched.profile.zoo_profile`)."""
    import torch

    from commsched.models.zoo import build_model
    from commsched.profile.zoo_profile import zoo_inventory

    inv = zoo_inventory(name, image_size=image_size)
    with torch.device("meta"):
        shapes = {n: tuple(p.shape) for n, p in build_model(name).named_parameters()}
    return tuple(ParamShape(t.name, shapes[t.name], t.bytes) for t in inv.tensors)
