"""Measured profiles from a ``torch.profiler`` Chrome trace of the user's own training job.

A user records a few training steps of their job (GPU or CPU) with ``torch.profiler.profile(...,
record_shapes=True, schedule=...)`` and ``prof.step()`` once per step, exports the Chrome trace
(``export_chrome_trace`` or ``tensorboard_trace_handler``) and gets the same ``commsched.profile/v1``
profile that ``profile --measure`` makes, plus, when the job all-reduced, a ``table`` cluster.

The parsing (:func:`load_trace`, :func:`parse_trace`, :func:`match_gradients`,
:func:`profile_from_trace`, :func:`allreduce_cluster`) is plain JSON and never imports torch; only
:func:`zoo_params` and :func:`module_params`, which read the model's parameters, do.

Events read (names as torch 2.14 writes them; see ``torch/profiler/_chrome_trace_export.py``):

- **Steps**: ``ProfilerStep#N`` user annotations, which ``prof.step()`` opens. Every other event
  belongs to the step whose [ts, ts + dur] holds its start (any thread: on a GPU the backward runs in
  the autograd engine's device thread). A trace without them is an error: nothing else delimits
  training steps reliably.
- **Backward**: the step's first ``autograd::engine::evaluate_function: ...`` (the engine's first node).
- **Forward**: ``fwdbwd`` flow starts (``ph: "s"``), which the exporter writes at every forward op
  that recorded an autograd node. The forward starts at the first such op and ends at the end of the
  last one before the backward (the loss's last op); both are widened to the outermost ``cpu_op``
  on the same thread that encloses them (``aten::conv2d`` around the flow's ``aten::convolution``).
  So ops that record no graph node (data loading, zero_grad, DDP's pre-forward work) are left out,
  and the gap between the loss and the engine's first node counts as backward, as in
  ``profile --measure`` (whose backward starts just before ``loss.backward()``).
- **Gradients ready**: ``torch::autograd::AccumulateGrad`` cpu ops, one per trainable parameter per
  backward pass; ``register_post_accumulate_grad_hook`` (what ``--measure`` and DDP use) fires at
  the end of that op, so a gradient is ready at the op's end. ``record_shapes=True`` gives each its
  ``Input Dims``: the gradient's shape, the parameter's shape.
- **Clock**: on the CPU (no kernels in the trace) host time is compute time. With GPU kernels, host
  ops only launch work, so every host instant t above becomes ``done(t)``: the latest end of the
  non-NCCL kernels, memcpys and memsets launched (``cuda_runtime``/``cuda_driver`` event with the same
  ``correlation``) at or before t, or t itself if later -- when that work has finished on the device,
  which is when an all-reduce launched at t (on NCCL's stream, after the compute stream) can start.
  The forward then starts at the device start of the first kernel launched after its host start.

Per step (DESIGN.md's profile format): ``forward_s`` = forward end - forward start;
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

**All-reduces** become a ``table`` cluster (sizes in bytes, the median time per size):

- GPU: ``ncclDevKernel_AllReduce...`` (NCCL >= 2.19) or ``ncclKernel_AllReduce...`` kernels, timed
  by their device duration. Their size: ``In msg nelems`` x ``dtype`` on the kernel (the exporter
  copies the launching ``record_param_comms`` op's metadata onto it), else on the ``record_param_comms``
  cpu op with the kernel's ``External id``.
- CPU (no NCCL kernels): gloo's ``gloo:all_reduce`` annotations, which span the collective on
  gloo's worker thread (``Input Dims`` x ``Input type``). ``c10d::allreduce_`` and
  ``record_param_comms`` on the calling thread only enqueue the work (tens of microseconds for a
  collective of milliseconds), so their durations are never used.

The worker count is the all-reduces' ``Group size``, else the trace's ``distributedInfo.world_size``.
Times per size are made non-decreasing by pooling adjacent violators, and flat below the smallest
size (as ``validate`` builds its table); a trace with all-reduces of a single size gives no cluster
(a table needs two sizes), with a note saying so.
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
from commsched.io import parse_json, read_bytes
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
    "load_trace",
    "match_gradients",
    "module_params",
    "parse_trace",
    "profile_from_trace",
    "zoo_params",
]

Shape = tuple[int, ...]
Clock = Literal["host", "device"]
AllreduceSource = Literal["device kernel", "gloo worker thread"]

STEP_PREFIX = "ProfilerStep#"
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
ENGINE_PREFIX = "autograd::engine::evaluate_function:"
PARAM_COMMS = "record_param_comms"
GLOO_ALLREDUCE = "gloo:all_reduce"
NCCL_ALLREDUCE_PREFIXES = ("ncclDevKernel_AllReduce", "ncclKernel_AllReduce")
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
US_PER_S = 1e6  # Chrome trace times are microseconds (dividing rounds 80 us to exactly 8e-05 s)

# Element sizes by the dtype names traces use: c10's ScalarType names (record_param_comms "dtype")
# and the C++ type names of "Input type" (gloo:all_reduce).
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
    (= backward start), in the order the gradients became ready, with their shapes."""

    name: str
    forward_s: float
    ready_s: tuple[float, ...]
    shapes: tuple[Shape, ...]

    def __post_init__(self) -> None:
        if len(self.ready_s) != len(self.shapes):
            raise CommschedError(f"step {self.name}: {len(self.ready_s)} ready times for {len(self.shapes)} shapes")
        for what, v in (("forward_s", self.forward_s), *(("ready_s", r) for r in self.ready_s)):
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
    """What a trace says, before it is matched to a model."""

    steps: tuple[TraceStep, ...]
    allreduces: tuple[AllreduceSample, ...]
    clock: Clock
    device: str
    world_size: int | None

    def __post_init__(self) -> None:
        if not self.steps:
            raise CommschedError("a parsed trace needs at least one step")


@dataclass(frozen=True)
class TraceMatch:
    """Parameter names of the trace's gradients, in the trace's ready order, and how they were matched."""

    names: tuple[str, ...]
    by_unique_shape: int  # gradients whose shape no other gradient of the model has
    by_order: int  # gradients matched among same-shaped ones by their order (see the module docs)
    reference_order: bool  # the trace's order equals the reference run's

    def __post_init__(self) -> None:
        if self.by_unique_shape + self.by_order != len(self.names):
            raise CommschedError(f"match counts {self.by_unique_shape} + {self.by_order} != {len(self.names)} names")


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
    """A complete ('X') event, times in microseconds."""

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
            _Event(str(e.get("name", "")), str(e.get("cat", "")), e.get("pid"), e.get("tid"), float(ts), float(dur),
                   args if isinstance(args, dict) else {})
        )
    complete.sort(key=lambda ev: ev.ts)
    flows.sort(key=lambda f: f[0])
    return complete, flows


# --- device clock ----------------------------------------------------------------------------------


class _DeviceClock:
    """``done(t)``: when the device work launched by host time t has finished (t itself on the CPU)."""

    def __init__(self, events: list[_Event]) -> None:
        launches = {e.args["correlation"]: e.ts for e in events if e.cat in LAUNCH_CATEGORIES and "correlation" in e.args}
        work = sorted(
            (launches[e.args["correlation"]], e.ts, e.end)
            for e in events
            if e.cat in DEVICE_CATEGORIES and not e.name.lower().startswith("nccl") and e.args.get("correlation") in launches
        )
        self.launch_ts = [w[0] for w in work]
        self.starts = [w[1] for w in work]
        self.prefix_end: list[float] = []
        for _, _, end in work:
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


def parse_trace(doc: object, where: str = "trace") -> ParsedTrace:
    """Steps (forward time, gradient ready times and shapes) and all-reduces of a Chrome trace.

    See the module docstring for which events are read and how; every malformed or missing piece
    is a CommschedError naming ``where`` and the step or event.
    """
    _check_chrome_trace(doc, where)
    assert isinstance(doc, dict)
    events, flows = _events(doc, where)
    steps = [e for e in events if e.name.startswith(STEP_PREFIX)]
    if not steps:
        raise CommschedError(
            f"{where}: no {STEP_PREFIX}N annotation; record with torch.profiler.profile(schedule=...) and call "
            f"prof.step() once per training step"
        )
    for a, b in zip(steps, steps[1:]):
        if b.ts < a.end:
            raise CommschedError(f"{where}: steps {a.name} and {b.name} overlap")
    clock = _DeviceClock(events)
    starts = [e.ts for e in events]
    parsed = tuple(
        _parse_step(s, events[bisect.bisect_left(starts, s.ts):bisect.bisect_right(starts, s.end)], flows, clock, where)
        for s in steps
    )
    allreduces = _allreduces(events, where)
    world = doc.get("distributedInfo", {}).get("world_size") if isinstance(doc.get("distributedInfo"), dict) else None
    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise CommschedError(f"{where}: distributedInfo.world_size must be a positive integer, got {shown(world)}")
    return ParsedTrace(parsed, allreduces, "device" if clock.on_device else "host", _device_name(doc, events), world)


def _outermost(events: list[_Event], starts: list[float], at: float, pid: Any, tid: Any, lo: float) -> _Event | None:
    """The outermost cpu_op on (pid, tid) that starts in [lo, at] and encloses instant ``at``
    (``events`` sorted by start, ``starts`` their starts)."""
    k = bisect.bisect_right(starts, at)
    best = None
    for e in events[:k][::-1]:
        if e.ts < lo:
            break
        if e.cat == "cpu_op" and e.pid == pid and e.tid == tid and e.ts <= at <= e.end:
            best = e
    return best


def _parse_step(step: _Event, window: list[_Event], flows: list[tuple[float, Any, Any]], clock: _DeviceClock, where: str) -> TraceStep:
    """One step from the events that start inside it (``window``, sorted by start)."""
    inside = [e for e in window if e is not step]
    starts = [e.ts for e in inside]
    engine = next((e for e in inside if e.name.startswith(ENGINE_PREFIX)), None)
    if engine is None:
        raise CommschedError(f"{where}: step {step.name} has no backward pass (no '{ENGINE_PREFIX} ...' event)")
    forward_flows = [f for f in flows if step.ts <= f[0] < engine.ts]
    if not forward_flows:
        raise CommschedError(
            f"{where}: step {step.name} has no forward op before its backward (no 'fwdbwd' flow event); the trace "
            f"must come from torch.profiler's Chrome export"
        )
    first, last = forward_flows[0], forward_flows[-1]
    first_op = _outermost(inside, starts, first[0], first[1], first[2], step.ts)
    last_op = _outermost(inside, starts, last[0], last[1], last[2], step.ts)
    fwd_start = first_op.ts if first_op else first[0]
    fwd_end = max(last_op.end if last_op else last[0], fwd_start)
    fwd_end = min(fwd_end, engine.ts)  # an op enclosing the engine (a user annotation) is not the loss

    grads = [e for e in inside if e.name == ACCUMULATE_GRAD and e.ts >= engine.ts]
    if not grads:
        raise CommschedError(f"{where}: step {step.name} has no '{ACCUMULATE_GRAD}' event: no gradient became ready")
    shapes = []
    for g in grads:
        dims = g.args.get("Input Dims")
        if not isinstance(dims, list) or not dims:
            raise CommschedError(
                f"{where}: step {step.name}: '{ACCUMULATE_GRAD}' at ts={g.ts:.3f} us has no 'Input Dims'; record the "
                f"trace with torch.profiler.profile(record_shapes=True)"
            )
        shapes.append(_check_shape(f"{where}: step {step.name}: '{ACCUMULATE_GRAD}' Input Dims[0]", dims[0]))
    grads_ends = sorted(zip((g.end for g in grads), range(len(grads))))
    ordered = [grads[i] for _, i in grads_ends]
    shapes = [shapes[i] for _, i in grads_ends]

    device_start = clock.started(fwd_start, fwd_end)
    backward_start = clock.done(fwd_end)
    ready = [clock.done(g.end) for g in ordered]
    return TraceStep(
        step.name,
        (backward_start - device_start) / US_PER_S,
        tuple(max(r - backward_start, 0.0) / US_PER_S for r in ready),
        tuple(shapes),
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


def _nelems_bytes(args: dict, where: str) -> int | None:
    n, dtype = args.get("In msg nelems"), args.get("dtype")
    if n is None and dtype is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0 or dtype not in DTYPE_BYTES:
        raise CommschedError(f"{where}: unreadable all-reduce size: 'In msg nelems'={shown(n)}, 'dtype'={shown(dtype)}")
    return n * DTYPE_BYTES[dtype]


def _group_size(args: dict, where: str) -> int | None:
    g = args.get("Group size")
    if g is None:
        return None
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise CommschedError(f"{where}: all-reduce 'Group size' must be a positive integer, got {shown(g)}")
    return g


def _allreduces(events: list[_Event], where: str) -> tuple[AllreduceSample, ...]:
    kernels = [e for e in events if e.cat == "kernel" and e.name.startswith(NCCL_ALLREDUCE_PREFIXES)]
    if kernels:
        # keyed by External id; an op without one cannot be a kernel's (None would pair unrelated events)
        comms = {
            e.args["External id"]: e
            for e in events
            if e.name == PARAM_COMMS and e.cat != "kernel" and e.args.get("External id") is not None
        }
        out = []
        for k in kernels:
            what = f"{where}: kernel {k.name[:60]!r} at ts={k.ts:.3f} us"
            nbytes = _nelems_bytes(k.args, what)
            group = _group_size(k.args, what)
            ext = k.args.get("External id")
            op = comms.get(ext) if ext is not None else None
            if nbytes is None and op is not None:
                nbytes = _nelems_bytes(op.args, what)
                group = group if group is not None else _group_size(op.args, what)
            if nbytes is None:
                raise CommschedError(
                    f"{what} has no size: neither it nor a '{PARAM_COMMS}' op with its External id carries "
                    f"'In msg nelems' and 'dtype'"
                )
            if k.dur <= 0:
                raise CommschedError(f"{what} has a duration of {k.dur} us; a measured all-reduce takes time")
            out.append(AllreduceSample(nbytes, k.dur / US_PER_S, "device kernel", group))
        return tuple(out)
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


# --- profile and cluster -----------------------------------------------------------------------------


def profile_from_trace(
    trace: ParsedTrace,
    params: Sequence[ParamShape],
    *,
    model: str,
    batch_size: int,
    device: str | None = None,
    trace_name: str = "trace",
) -> TraceProfile:
    """The measured profile (medians over the trace's steps) and, with all-reduces, the table cluster."""
    if not params:
        raise CommschedError(f"model {model!r} has no gradient tensors to match the trace against")
    first = trace.steps[0]
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
    notes = []
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
    if workers is None:
        raise CommschedError(
            f"{trace_name}: {len(samples)} all-reduces but no worker count (no 'Group size' on them, no "
            f"distributedInfo.world_size in the trace)"
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


# --- the model's parameters (torch) ----------------------------------------------------------------


def module_params(module: Any, example_inputs: tuple, loss_fn: Any = None, name: str = "model") -> tuple[ParamShape, ...]:
    """``module``'s gradient tensors in the order a real backward makes them ready (one step of
    :func:`commsched.models.inventory.inventory`), with shapes from ``named_parameters``."""
    from commsched.models.inventory import inventory

    inv = inventory(module, example_inputs, loss_fn=loss_fn, name=name)
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    return tuple(ParamShape(t.name, shapes[t.name], t.bytes) for t in inv.tensors)


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
