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


def _check_time(what: str, value: float, *, allow_zero: bool = True) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise CommschedError(f"{what} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise CommschedError(f"{what} must be {bound} seconds, got {value!r}")


def _check_bytes(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CommschedError(f"{what} must be a positive whole number of bytes, got {value!r}")


@dataclass(frozen=True)
class TensorSpec:
    """One gradient tensor: its name, size and the backward compute that precedes its readiness.

    ``backward_s`` is the compute time between the previous tensor becoming ready and this one
    (for the first tensor: from the start of backward), as in DESIGN.md's profile format.
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
            raise CommschedError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if self.source not in ("estimated", "measured"):
            raise CommschedError(f"profile source must be 'estimated' or 'measured', got {self.source!r}")
        _check_time("forward_s", self.forward_s)
        _check_time("optimizer_s", self.optimizer_s)
        if not self.tensors:
            raise CommschedError(f"profile of {self.model!r} has no gradient tensors")
        if self.forward_s + sum(t.backward_s for t in self.tensors) <= 0:
            raise CommschedError(f"profile of {self.model!r} has no compute time: forward_s and every backward_s are 0")
        seen: set[str] = set()
        for t in self.tensors:
            if t.name in seen:
                raise CommschedError(f"profile of {self.model!r} lists tensor {t.name!r} twice")
            seen.add(t.name)
        object.__setattr__(self, "tensors", tuple(self.tensors))

    @property
    def ready_s(self) -> tuple[float, ...]:
        """ready_i = forward_s + sum(backward_s[0..i]) (DESIGN.md, profile format)."""
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
        _check_bytes(f"bucket {self.tensors[0]!r}.. bytes", self.bytes)


@dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for a plan (seconds)."""

    iteration_s: float
    compute_s: float
    comm_s: float
    non_overlapped_comm_s: float


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
