"""Horovod's tensor fusion: a background loop that, once per cycle, fuses every ready tensor.

Each cycle the loop takes all gradients ready by then (in ready order), packs them into fusion
buffers of at most ``threshold_bytes`` (a tensor larger than the threshold goes alone), all-reduces
the buffers one after another, and starts the next cycle ``cycle_s`` after the previous one began or
when the all-reduces end, whichever is later (``RunLoopOnce`` in ``horovod/common/operations.cc``).
Defaults: 128 MiB and 1 ms in that code today; 64 MiB and 5 ms before v0.21 (and 64 MiB is still
what the docs say). Negotiation, the response cache and the wait for the next tick are not charged:
the simulator scores the resulting buckets like every other plan's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commsched.cost.models import CostModel
from commsched.errors import CommschedError
from commsched.types import MAX_BYTES, MAX_SECONDS, ModelProfile

MIB = 1024 * 1024


@dataclass(frozen=True)
class Horovod:
    threshold_bytes: int = 128 * MIB
    cycle_s: float = 1e-3
    name: str = "horovod"

    def __post_init__(self) -> None:
        t = self.threshold_bytes
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= MAX_BYTES:
            raise CommschedError(f"horovod threshold_bytes must be a whole number of bytes in [0, 2**50], got {t!r}")
        c = self.cycle_s
        # a cycle below a nanosecond is below any timer loop's resolution (and overflows the cycle count)
        if isinstance(c, bool) or not (isinstance(c, (int, float)) and math.isfinite(c) and 1e-9 <= c <= MAX_SECONDS):
            raise CommschedError(f"horovod cycle_s must be a number of seconds in [1e-9, 1e6], got {c!r}")

    def ends(self, profile: ModelProfile, cost: CostModel) -> tuple[int, ...]:
        ready = profile.ready_s
        n = len(ready)
        ends: list[int] = []
        i = 0
        tick = profile.forward_s
        while i < n:
            if ready[i] > tick:  # nothing ready: idle cycles up to the first tick at or after it
                tick += math.ceil((ready[i] - tick) / self.cycle_s) * self.cycle_s
                if ready[i] > tick:  # rounding
                    tick += self.cycle_s
                continue
            j = i
            while j < n and ready[j] <= tick:
                j += 1
            assert j > i, "a tick at or after the next ready time takes at least that tensor"
            busy = 0.0
            size = 0
            for k in range(i, j):
                b = profile.tensors[k].bytes
                if size and size + b > self.threshold_bytes:
                    ends.append(k)
                    busy += cost.time_s(size)
                    size = 0
                size += b
            ends.append(j)
            busy += cost.time_s(size)
            tick = max(tick + self.cycle_s, tick + busy)
            i = j
        return tuple(ends)


def horovod_legacy() -> Horovod:
    """Horovod before v0.21: 64 MiB fusion threshold, 5 ms cycle."""
    return Horovod(threshold_bytes=64 * MIB, cycle_s=5e-3, name="horovod-legacy")
