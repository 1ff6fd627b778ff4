"""Frozen dataclasses shared by every stage: profiles, buckets, plans, timelines.

Times are seconds and sizes bytes; the unit is in the field name. Each class validates itself at
construction and raises :class:`~commsched.errors.CommschedError` naming the bad value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Literal

from commsched.errors import CommschedError

ProfileSource = Literal["estimated", "measured"]
SpanKind = Literal["forward", "backward", "allreduce", "optimizer"]

# --- bounds -------------------------------------------------------------------------------------
# Upper bounds on what any input may say. Each lies far beyond every real input, and each keeps every
# number derived from bounded inputs finite: a sum or product of them stays below float's 1.8e308 by
# hundreds of orders of magnitude, so no inf or nan can reach a plan, a CSV file or a plot.

MAX_BYTES = 2**50
"""1 PiB: one tensor, one bucket, a whole model's gradients, a measured message. The largest models
trained have ~2**41 bytes of FP32 gradients (a trillion parameters: 4 TB)."""

MAX_SECONDS = 1e6
"""~11.6 days: any single duration an input gives (a forward pass, one tensor's backward, the
optimizer step, the compute of one iteration, an all-reduce's startup, a measured all-reduce).
A training iteration or one message that takes longer is not a measurement."""

MIN_COMPUTE_S = 1e-9
"""1 ns: the least compute (forward + backward) of one iteration. One GPU kernel launch takes
microseconds; a profile that computes for less (5e-324 s, say) describes no training step, and
scaling factors computed from it would underflow to 0."""

MAX_S_PER_BYTE = 1.0
"""One second per byte (8 bit/s): any per-byte cost (beta, gamma, a fitted slope). The slowest link
anyone trains over is millions of times faster. With MAX_BYTES, one all-reduce costs < 1e20 s."""

MAX_WORKERS = 2**20
"""1,048,576 workers: more than ten times the largest GPU clusters built. Table II's products
(2(N-1) alpha, log N factors) then stay finite and far below float range."""

MAX_BATCH_SIZE = 2**24
"""16.7 million samples per worker: above any per-GPU batch (thousands at most for small models)."""

MAX_IMAGE_SIZE = 8192
"""Side of a square input image (64 megapixels): torchvision's classifiers train at 224-518."""

MAX_INPUT_BYTES = 2**31
"""2 GiB: one input tensor a zoo model is profiled with on this machine's CPU (batch x 3 x H x W x
4 bytes for images, batch x 128 x 8 for token ids). An estimated profile allocates it at batch 2;
``--measure`` at the full batch, and then trains on it, which needs many times more for activations:
resnet50 at batch 32 and 224x224 takes 19 MB."""

MAX_STEPS = 100_000
"""Timed or warm-up steps of ``profile --measure``, rounds and steps of ``validate``: a CPU step takes
0.01-10 s, so 100,000 of them run for hours to days."""


def too_big_int(value: object) -> bool:
    """An int that float() cannot hold (a 400-digit integer): it raises OverflowError there."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**1023


def shown(value: object) -> str:
    """The value for an error message, one line and short: a 400-digit integer is named by its digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        # str() of an int over 4300 digits raises ValueError (Python's int_max_str_digits): count bits
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        return f"{'-' if value < 0 else ''}an integer of about {digits} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def optional_text(doc: dict, key: str, default: str, where: str) -> str:
    """An optional text field of an input document: ``default`` where it is absent, else a string
    (a number or null was shown as "7" or "None" before)."""
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise CommschedError(f"{where}: {key} must be a string, got {shown(value)}")
    return value


def check_number(
    what: str,
    value: object,
    unit: str,
    *,
    upper: float,
    lower: float | None = 0.0,
    allow_lower: bool = True,
    whole: bool = False,
    upper_text: str | None = None,
) -> float:
    """``value`` as a float if it is a finite number in [lower, upper] (or (lower, upper] with
    ``allow_lower`` False; ``lower`` None means -upper), else CommschedError naming it and its unit.
    ``whole`` asks for an int; ``upper_text`` names the bound in messages (e.g. "2**50"). Booleans
    are not numbers here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        kind = "a whole number" if whole else "a number"
        raise CommschedError(f"{what} must be {kind} of {unit}, got {shown(value)}")
    if too_big_int(value) and value > 0 and upper_text:
        raise CommschedError(f"{what} must be at most {upper_text} {unit}, got {shown(value)}")
    if too_big_int(value) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number of {unit}, got {shown(value)}")
    lo = -upper if lower is None else lower
    if value < lo or (value == lo and not allow_lower):
        bound = f">= {lo:g}" if allow_lower else f"> {lo:g}"
        raise CommschedError(f"{what} must be {bound} {unit}, got {shown(value)}")
    if value > upper:
        raise CommschedError(f"{what} must be at most {upper_text or format(upper, 'g')} {unit}, got {shown(value)}")
    return float(value)


def check_finite(what: str, value: object) -> float:
    """A computed number (a prediction, a span's time): finite, as float. Not bounded: a slow cluster
    can predict long iterations from bounded inputs."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or too_big_int(value) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number, got {shown(value)}")
    return float(value)


def check_json_values(what: str, doc: object) -> None:
    """Every number in a JSON-like value (dicts, lists) is finite: json.dumps would write NaN or
    Infinity, which no strict JSON reader accepts. Walks iteratively (no recursion limit)."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise CommschedError(f"{what} holds a non-finite number ({v!r}); JSON has none")
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _check_time(what: str, value: float, *, allow_zero: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or too_big_int(value) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number of seconds, got {shown(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise CommschedError(f"{what} must be {bound} seconds, got {shown(value)}")
    if value > MAX_SECONDS:
        raise CommschedError(f"{what} must be at most {MAX_SECONDS:g} seconds (11.6 days), got {shown(value)}")


def _check_bytes(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CommschedError(f"{what} must be a positive whole number of bytes, got {shown(value)}")
    if value > MAX_BYTES:
        raise CommschedError(f"{what} must be at most 2**50 bytes (1 PiB), got {shown(value)}")


@dataclass(frozen=True)
class TensorSpec:
    """One gradient tensor: its name, size and the backward compute that precedes its readiness.

    ``backward_s`` is the compute time between the previous tensor becoming ready and this one
    (for the first tensor: from the start of backward), as in docs/design.md's profile format.
    """

    name: str
    bytes: int
    backward_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CommschedError(f"tensor name must be a non-empty string, got {self.name!r}")
        _check_bytes(f"tensor {self.name!r} bytes", self.bytes)
        _check_time(f"tensor {self.name!r} backward_s", self.backward_s)


@dataclass(frozen=True)
class ModelProfile:
    """A model's gradient tensors in the order their gradients become ready (first ready first)."""

    model: str
    batch_size: int
    device: str
    source: ProfileSource
    forward_s: float
    tensors: tuple[TensorSpec, ...]
    optimizer_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size <= 0:
            raise CommschedError(f"batch_size must be a positive integer, got {shown(self.batch_size)}")
        if self.batch_size > MAX_BATCH_SIZE:
            raise CommschedError(f"batch_size must be at most 2**24 samples per worker, got {shown(self.batch_size)}")
        if self.source not in ("estimated", "measured"):
            raise CommschedError(f"profile source must be 'estimated' or 'measured', got {self.source!r}")
        _check_time("forward_s", self.forward_s)
        _check_time("optimizer_s", self.optimizer_s)
        if not self.tensors:
            raise CommschedError(f"profile of {self.model!r} has no gradient tensors")
        compute = self.forward_s + math.fsum(t.backward_s for t in self.tensors)
        if compute <= 0:
            raise CommschedError(f"profile of {self.model!r} has no compute time: forward_s and every backward_s are 0")
        if compute < MIN_COMPUTE_S:
            raise CommschedError(
                f"profile of {self.model!r} computes for {compute:.3g} s per iteration (forward and backward), "
                f"less than {MIN_COMPUTE_S:g} s: no training step is that short"
            )
        if compute + self.optimizer_s > MAX_SECONDS:
            raise CommschedError(
                f"profile of {self.model!r} computes for {compute + self.optimizer_s:.6g} s per iteration "
                f"(forward, backward and optimizer), over the bound of {MAX_SECONDS:g} s (11.6 days)"
            )
        total = sum(t.bytes for t in self.tensors)
        if total > MAX_BYTES:
            raise CommschedError(f"profile of {self.model!r} has {total} bytes of gradients, over the bound of 2**50 (1 PiB)")
        seen: set[str] = set()
        for t in self.tensors:
            if t.name in seen:
                raise CommschedError(f"profile of {self.model!r} lists tensor {t.name!r} twice")
            seen.add(t.name)
        object.__setattr__(self, "tensors", tuple(self.tensors))

    @property
    def ready_s(self) -> tuple[float, ...]:
        """ready_i = forward_s + sum(backward_s[0..i]) (docs/design.md, the profile format)."""
        return tuple(accumulate((t.backward_s for t in self.tensors), initial=self.forward_s))[1:]

    @property
    def backward_s(self) -> float:
        return sum(t.backward_s for t in self.tensors)

    @property
    def compute_s(self) -> float:
        """Forward plus backward: the iteration time of one worker with no communication."""
        return self.forward_s + self.backward_s

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)


@dataclass(frozen=True)
class Bucket:
    """A contiguous run of tensors (in ready order) fused into one all-reduce.

    ``resources`` is reserved for the resource-sharing planners (NCCL channels/threads); ``None``
    means the communication library's default.
    """

    tensors: tuple[str, ...]
    bytes: int
    resources: dict | None = None

    def __post_init__(self) -> None:
        if not self.tensors:
            raise CommschedError("a bucket must hold at least one tensor")
        object.__setattr__(self, "tensors", tuple(self.tensors))
        _check_bytes(f"bytes of the bucket from {self.tensors[0]!r}", self.bytes)
        if self.resources is not None:
            if not isinstance(self.resources, dict):
                raise CommschedError(f"resources of the bucket from {self.tensors[0]!r} must be an object or null, got {shown(self.resources)}")
            check_json_values(f"resources of the bucket from {self.tensors[0]!r}", self.resources)


@dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for a plan (seconds)."""

    iteration_s: float
    compute_s: float
    comm_s: float
    non_overlapped_comm_s: float

    def __post_init__(self) -> None:
        for what in ("iteration_s", "compute_s", "comm_s", "non_overlapped_comm_s"):
            check_finite(f"predicted {what}", getattr(self, what))


@dataclass(frozen=True)
class Plan:
    """Buckets in the order they are communicated; together they cover every tensor exactly once."""

    strategy: str
    model: str
    buckets: tuple[Bucket, ...]
    predicted: Prediction | None = None
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.buckets:
            raise CommschedError(f"plan {self.strategy!r} has no buckets")
        object.__setattr__(self, "buckets", tuple(self.buckets))
        if not isinstance(self.params, dict):
            raise CommschedError(f"plan {self.strategy!r} params must be an object, got {shown(self.params)}")
        check_json_values(f"plan {self.strategy!r} params", self.params)

    @property
    def tensor_order(self) -> tuple[str, ...]:
        return tuple(name for b in self.buckets for name in b.tensors)


@dataclass(frozen=True)
class Span:
    """One interval of a timeline: a compute phase or one all-reduce."""

    kind: SpanKind
    name: str
    start_s: float
    end_s: float
    bytes: int = 0

    def __post_init__(self) -> None:
        check_finite(f"{self.kind} span {self.name!r} start_s", self.start_s)
        check_finite(f"{self.kind} span {self.name!r} end_s", self.end_s)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Timeline:
    """One iteration: compute spans, one span per all-reduce, and the summary numbers."""

    spans: tuple[Span, ...]
    iteration_s: float
    compute_s: float
    comm_s: float
    non_overlapped_comm_s: float

    def __post_init__(self) -> None:
        for what in ("iteration_s", "compute_s", "comm_s", "non_overlapped_comm_s"):
            check_finite(f"timeline {what}", getattr(self, what))

    @property
    def allreduces(self) -> tuple[Span, ...]:
        return tuple(s for s in self.spans if s.kind == "allreduce")

    def prediction(self) -> Prediction:
        return Prediction(
            iteration_s=self.iteration_s,
            compute_s=self.compute_s,
            comm_s=self.comm_s,
            non_overlapped_comm_s=self.non_overlapped_comm_s,
        )
