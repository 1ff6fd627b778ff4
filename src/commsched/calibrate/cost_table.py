"""The all-reduce cost table that predictions use, and the message sizes that measure it.

``validate`` measures all-reduce as DDP's reducer issues it (chains of buckets launched back to
back, :func:`commsched.runtime.validate.probes.bench_chains`); this module turns those per-call
times into a non-decreasing ``table`` cost (:func:`table_cost`) and brings that table to the
minutes of the rounds (:func:`drifted`, from the probes' ``anchor_*`` times). Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

import numpy as np

from commsched.cost.fit import nondecreasing_points
from commsched.cost.models import Table

if TYPE_CHECKING:  # the samples' type lives beside the benchmark, which imports torch
    from commsched.runtime.bench_comm import CommSamples

MIB = 1 << 20
PROBE_SIZES = (16 * 1024, 128 * 1024, 1 * MIB, 8 * MIB)  # from per-call costs to bandwidth
# the gain of two all-reduces at once is measured where they move data: a 16 KiB pair measured a
# "gain" of 0.2-1.2 that was only two wake-ups overlapped (one alone waits for its thread to wake,
# two launched together share that wait), while the same runs measured -0.3 to +0.1 at 1 MiB; the
# per-call costs of small all-reduces back to back are in the cost table already (bench_chains)
GAIN_SIZES = (1 * MIB, 8 * MIB)
# beyond PROBE_SIZES one more probe at the largest bucket a plan can have (every gradient), capped
# here: the factor under compute and the cost table's drift were flat beyond 8 MiB before, and
# wrong there. googlenet's 24 MB buckets went faster under compute than the 8 MiB chains said (its
# plans over-predicted by 5-7%), and alexnet's 233 MB all-reduce took the 8 MiB anchors' drift of
# -7% it did not have (1023 ms measured before the rounds and 1020 in a separate run, 950
# predicted: synceasgd -6.8%)
LARGE_PROBE_MAX = 64 * MIB


def probe_sizes(max_bytes: int) -> tuple[int, ...]:
    """The probe's message sizes for a model whose gradients are ``max_bytes`` in all:
    ``PROBE_SIZES`` up to it, and beyond 8 MiB ``min(max_bytes, LARGE_PROBE_MAX)`` (a multiple of 4)."""
    sizes = [s for s in PROBE_SIZES if s <= max(max_bytes, PROBE_SIZES[0])]
    large = min(max_bytes, LARGE_PROBE_MAX) // 4 * 4
    if large > PROBE_SIZES[-1]:
        sizes.append(large)
    return tuple(sizes)


# the probe's long all-reduce (sized to outlast a backward pass) is capped here, and so is the largest
# size the cost benchmark times: one all-reduce beyond it is not a bucket any zoo model makes
LONG_MESSAGE_MAX_BYTES = 1 << 28


def chain_length(size_bytes: int) -> int:
    """Calls per timed chain: 8 for small messages (their per-call cost is what is measured), fewer
    as messages grow, one from 8 MiB on."""
    return max(1, min(8, (8 * MIB) // size_bytes))


# calls in one probe chain at most, and its bytes at most (a chain's buffers are held for the run)
MAX_CHAIN_CALLS = 32


def chain_calls(size_bytes: int, backward_s: float, call_s: float) -> int:
    """Calls in the probe's chain of ``size_bytes`` all-reduces of ``call_s`` each: as many as take
    about a third of a ``backward_s`` pass, at least one, at most ``MAX_CHAIN_CALLS`` and at most
    ``LONG_MESSAGE_MAX_BYTES`` in all. The last bound acts only on sizes beyond 8 MiB, where one call
    takes less than about a thirteenth of the backward pass (64 MiB: more than 4 calls in a third of
    it), as on loopback: ``validate --model resnet152 --image-size 64`` on one rank had chains of 32
    calls at every size, 2 GiB at 64 MiB held for the whole run."""
    calls = max(1, min(MAX_CHAIN_CALLS, round(backward_s / 3 / max(call_s, 1e-6))))
    return max(1, min(calls, LONG_MESSAGE_MAX_BYTES // size_bytes))


def chain_bytes_at_most(size_bytes: int) -> int:
    """The most bytes :func:`chain_calls` lets a chain of ``size_bytes`` calls hold."""
    return max(size_bytes, min(MAX_CHAIN_CALLS * size_bytes, LONG_MESSAGE_MAX_BYTES // size_bytes * size_bytes))



def table_cost(samples: CommSamples, gain: float = 0.0, threads: int = 1) -> Table:
    """The measured per-call times as a ``table`` cost of one all-reduce alone, made non-decreasing
    in size by pooling adjacent violators (a larger message never costs less; what is left of a dip
    is noise), and flat below the smallest size measured.

    Chains of more than one call ran on the runtime's threads: with a concurrency ``gain`` two in
    flight went 1 + gain times as fast as one, so their per-call time is multiplied back by that
    (the simulator applies the gain itself)."""
    times = [
        t * (1.0 + gain) if threads > 1 and chain_length(size) > 1 else t
        for size, t in zip(samples.sizes_bytes, samples.time_s)
    ]
    return Table(*nondecreasing_points(samples.sizes_bytes, times))


def anchors_of(samples: list[dict]) -> dict[int, float]:
    """Per probe size, the median per-call time of the cost table's chain in these samples."""
    keys = [k for k in samples[0] if k.startswith("anchor_")]
    return {int(k[7:]): statistics.median(s[k] for s in samples) for k in keys}


def drifted(cost: Table, anchors: dict[int, float]) -> Table:
    """The cost table measured before the rounds, brought to the rounds' minutes: scaled by the
    ratio of the in-round to the table's time at the probe sizes, interpolated in log2(size) and
    flat beyond them, and made non-decreasing again as :func:`table_cost` makes it. On this machine all-reduce times drifted by a third between the minutes
    before the rounds and the rounds themselves (mobilenet_v2: 4.4 ms against 2.2 ms per 16 KiB
    call), like compute does; the profile is calibrated inside the rounds for the same reason."""
    if not anchors:
        return cost
    sizes = sorted(anchors)
    xs = [math.log2(b) for b in sizes]
    ys = [anchors[b] / max(cost.time_s(b), 1e-12) for b in sizes]
    scale = np.interp(np.log2(np.asarray(cost.bytes, dtype=np.float64)), xs, ys)
    # made non-decreasing again: scales that differ between anchors can turn the table down (a
    # resnet18 run's 46.7 MB anchor drifted less than its 8 MiB one, and 32 MiB came out slower
    # than 46.7 MB, a table that "extrapolates to 0 s")
    return Table(*nondecreasing_points(cost.bytes, [float(t * f) for t, f in zip(cost.seconds, scale)]))

