"""PyTorch DistributedDataParallel's bucketing.

DDP assigns gradients to buckets in the order they become ready (it rebuilds its buckets in that
order after the first iteration), closing a bucket as soon as its size reaches the limit: the first
bucket's limit is ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB), every later one
``bucket_cap_mb`` (default 25, in MiB). Given ``bucket_cap_mb`` explicitly, torch 2.14 uses it for the
first bucket too (``BucketCapacityConfig`` in ``torch/nn/parallel/distributed.py``), and so does
:func:`ddp_with_cap`. This mirrors ``_compute_bucket_assignment_by_size`` in
``torch/csrc/distributed/c10d/reducer.cpp`` for one dtype on one device; a test checks it against
that function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.types import MAX_BYTES, ModelProfile

MIB = 1024 * 1024


@dataclass(frozen=True)
class DDP:
    cap_bytes: int = 25 * MIB
    first_bucket_bytes: int = 1 * MIB
    name: str = "ddp"

    def __post_init__(self) -> None:
        for what in ("cap_bytes", "first_bucket_bytes"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_BYTES:
                raise CommschedError(f"ddp {what} must be a whole number of bytes in (0, 2**50], got {v!r}")

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        ends: list[int] = []
        size, limit = 0, self.first_bucket_bytes
        for i, t in enumerate(profile.tensors):
            size += t.bytes
            if size >= limit:
                ends.append(i + 1)
                size, limit = 0, self.cap_bytes
        if not ends or ends[-1] != len(profile.tensors):
            ends.append(len(profile.tensors))
        return tuple(ends)


def ddp_with_cap(bucket_mb: float) -> DDP:
    """DDP(bucket_cap_mb=X) as torch 2.14 builds it: every bucket, the first included, capped at X MiB."""
    if not (isinstance(bucket_mb, (int, float)) and math.isfinite(bucket_mb) and bucket_mb > 0):
        raise CommschedError(f"bucket cap must be a finite number > 0 of MiB, got {bucket_mb!r}")
    cap = max(1, int(bucket_mb * MIB))
    return DDP(cap_bytes=cap, first_bucket_bytes=cap)
