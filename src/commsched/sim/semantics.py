"""Execution semantics: how the runtime that runs a plan executes its all-reduces, and how they and
backward compute slow each other down. Every simulation and every planner takes one.

Backends (``backend``, ``threads``):

- ``nccl``: one stream per communicator, so a process group's all-reduces run one at a time in the
  order launched (docs/design.md's reference semantics; ``threads`` is 1).
- ``gloo``: ``ProcessGroupGloo`` puts every collective on one FIFO work queue served by
  ``options.threads`` worker threads (2 unless the group was made with other options: torch 2.14's
  ``ProcessGroupGloo::runLoop`` pops the queue's front, each thread runs one collective to its end),
  so up to ``threads`` all-reduces are in flight at once, over the same connections. With n in
  flight each progresses at (1 + concurrency_gain x (n - 1)) / n of its solo speed: gain 0 means
  they share the link (the total rate is that of one), gain 1 that they do not slow each other.
  ``validate`` measures the gain (two all-reduces launched together against one after the other)
  at 1 and 8 MiB: about 0 on the emulated cluster from 1 to 64 MiB (BENCHMARKS.md; below that a
  call's time is mostly a wake-up, which two calls share even one after the other).

DDP launches buckets in index order as they become ready (the reducer's ``next_bucket_``), so a
bucket is launched when its last gradient is ready and every earlier bucket is launched.

Contention (LIBRA's g(b, r) in its simplest measured form, with a per-call term):

- ``compute_slowdown`` c: while an all-reduce is in flight, backward compute runs at 1 / (1 + c);
  ``compute_slowdown_concurrent`` c2 (gloo): the same while two or more run at once (their threads
  compete with compute for the cores: measured on the emulated cluster, resnet18's backward pass
  ran at 1 / 1.81 of its speed under one 160 MB all-reduce and 1 / 2.24 under two; None means c);
- ``comm_slowdown`` m: while backward compute runs, an all-reduce progresses at 1 / (1 + m);
- ``call_overhead_s`` d: while backward compute runs, an all-reduce of b bytes takes d seconds
  more than its factor says, (1 + m)(F(b) T(b) + d) in all, F(b) = factor(b) x ratio(b)
  (:meth:`Semantics.bucket_factor`): its factor under compute is F(b) + d / T(b) (a T of 0 gets
  no d). d may be negative: the buckets of the runtime then go
  faster under compute than the factor says, to no less than ``CALL_FLOOR`` (a quarter) of it
  (:func:`factor_with_call`). ``validate`` fitted d to stock DDP's own buckets until
  ``launch_factor_points`` took its place (it now leaves d at 0), and a pass of
  mobilenet_v2 with 158 of them once needed -0.4 ms per call: its 16 KiB buckets took about 0.9
  ms each under compute, where the probe's chains of 16 KiB all-reduces said 1.3 (BENCHMARKS.md).
  It was first seen as a cost, beside compute only: on
  the emulated cluster, buckets that stock DDP launched one per gradient from the backward pass
  took 0.10-0.28 ms more per call while the pass ran than a chain of 16 KiB all-reduces launched
  at its start, and went at their speed alone once it ended (``benchmarks/investigations/tail_rate.py``,
  BENCHMARKS.md; those passes were recorded, and with hundreds of buckets the recorder itself
  costs 8-15% of a step);
- ``launch_compute_s`` e: an all-reduce launched while backward compute still has work to do costs
  compute e more seconds of work, right after the launch (at the rates above). DDP's reducer
  launches a bucket from the backward pass, and on the emulated cluster stock DDP with one bucket
  per gradient slowed mobilenet_v2's backward pass about twice as much as one long all-reduce or a
  chain of 16 KiB ones in flight (``benchmarks/investigations/tail_rate.py``, BENCHMARKS.md): a cost per launch,
  not per second in flight (recorded too).
  ``validate`` fits e to an unrecorded pass of stock DDP with one bucket per gradient
  (:func:`commsched.calibrate.launch.launch_costs`);
- ``launch_factor_points``: a table of (message bytes, ratio): while backward compute runs, an
  all-reduce of b bytes goes at 1 / (factor(b) x ratio(b)) of its speed alone (before d), the
  ratio interpolated like ``under_compute`` (empty: 1), no lower than ``CALL_FLOOR``. ``validate``
  fits it at two sizes to two unrecorded passes of stock DDP (a bucket per gradient; about 16
  buckets), :func:`commsched.calibrate.launch.launch_costs`: the buckets DDP launches from the
  backward pass need not go as the probe's chains of one size launched at its start do (at 2
  Gbit/s resnet50's 7.5 MiB buckets went at 0.88 of the chains' factor under compute). A ratio, not
  a time per call, because a bandwidth-bound all-reduce's time under compute scales with its size:
  a d fitted at the two passes' median buckets (1-16 KiB, 1-16 MiB) and interpolated between them
  made plans of 17-48 buckets (0.5-3 MiB on average) 4-7% too fast
  (resnet50 at 2 Gbit/s, googlenet and bert_small at 500 Mbit/s; BENCHMARKS.md, "a ratio, not a
  time per call");
- ``under_compute``: a table of (message bytes, factor): while backward compute runs, an
  all-reduce of b bytes progresses at 1 / factor(b) of its speed alone (on top of 1 / (1 + m)),
  the factor interpolated linearly in log2(b) between the points and flat beyond them (empty: 1).
  This is the size dependence of LIBRA's p(c, r) in the message size c, as ``validate`` measures
  it: chains of all-reduces of one size launched at the start of a backward pass against the same
  alone. On the emulated cluster small all-reduces came out *faster* under compute (16 KiB:
  0.40-0.75, the rank's core never idles, so its wake-ups are quicker) and 1 MiB ones slower
  (1.14-1.28) (BENCHMARKS.md); no single factor or (1 + m)(T + d) form fits both.

The factor acts only while compute runs, like m: measured, 16 KiB all-reduces still queued when a
backward pass ended went at their speed alone (``benchmarks/investigations/tail_rate.py``). (Until issue 11's
last change it was charged whole when a bucket was launched under compute, so the buckets of a
many-bucket plan queued past the end of backward kept their under-compute speed; with that and
without e, mobilenet_v2's 158-bucket plan was predicted 8% short, with both changes -1.2%,
BENCHMARKS.md.)

With gain 0, c2 = c, one factor and one ratio for every size and no d, every rate in the run depends only on whether
something is in flight: what :attr:`Semantics.serial_equivalent` needs. Factors that differ by
size break it: on gloo's threads a small all-reduce beside a large one under compute goes at its
own (faster) speed, which one after the other it cannot.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from commsched.cost.resource_models import interp_log2, size_points
from commsched.errors import CommschedError

Backend = Literal["nccl", "gloo"]
GLOO_DEFAULT_THREADS = 2  # ProcessGroupGloo::Options default in torch 2.14 (``_threads`` of the default group)


# a negative d speeds an all-reduce under compute up to this fraction of its factor's time, no more,
# and a launch ratio is no lower: it keeps every factor positive, with room below the fastest
# measured (about 0.7 of the factor, mobilenet_v2's 16 KiB buckets; ratios that reach it are a pass
# faster than the model can make it, BENCHMARKS.md)
CALL_FLOOR = 0.25


def _check(what: str, v: float, upper: float, lower: float = 0.0) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and lower <= v <= upper):
        raise CommschedError(f"{what} must be a finite number in [{lower:g}, {upper:g}], got {v!r}")


def factor_with_call(factor, call_overhead_s: float, alone_s):
    """An all-reduce's factor under compute with the per-call term: factor(b) + d / T(b) (a T of 0
    gets no d), and for a negative d no less than ``CALL_FLOOR`` x factor(b). Scalars or numpy
    arrays; the simulator and ``optimal_contended`` both use it, so they agree."""
    if not call_overhead_s:
        return factor
    if np.ndim(factor) == 0 and np.ndim(alone_s) == 0:  # the simulator's case, per bucket: plain floats
        out = factor + (call_overhead_s / alone_s if alone_s > 0 else 0.0)
        return max(out, CALL_FLOOR * factor) if call_overhead_s < 0 else out
    t = np.asarray(alone_s, dtype=np.float64)
    out = factor + np.where(t > 0, call_overhead_s / np.where(t > 0, t, 1.0), 0.0)
    if call_overhead_s < 0:
        out = np.maximum(out, CALL_FLOOR * np.asarray(factor, dtype=np.float64))
    return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class Semantics:
    backend: Backend = "nccl"
    threads: int = 1
    concurrency_gain: float = 0.0
    compute_slowdown: float = 0.0
    comm_slowdown: float = 0.0
    call_overhead_s: float = 0.0
    compute_slowdown_concurrent: float | None = None
    under_compute: tuple[tuple[int, float], ...] = ()
    launch_compute_s: float = 0.0
    launch_factor_points: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in ("nccl", "gloo"):
            raise CommschedError(f"backend must be 'nccl' or 'gloo', got {self.backend!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= 64:
            raise CommschedError(f"threads must be a whole number in [1, 64], got {self.threads!r}")
        if self.backend == "nccl" and self.threads != 1:
            raise CommschedError(f"nccl runs a communicator's all-reduces one at a time: threads must be 1, got {self.threads}")
        _check("concurrency_gain", self.concurrency_gain, 1.0)
        _check("compute_slowdown", self.compute_slowdown, 1e3)
        _check("comm_slowdown", self.comm_slowdown, 1e3)
        _check("launch_compute_s", self.launch_compute_s, 1e3)
        _check("call_overhead_s", self.call_overhead_s, 1e3, -1e3)
        if self.compute_slowdown_concurrent is not None:
            _check("compute_slowdown_concurrent", self.compute_slowdown_concurrent, 1e3)
        object.__setattr__(self, "under_compute", size_points("under_compute", self.under_compute, 100))
        ratios = size_points("launch_factor_points", self.launch_factor_points, 100)
        low = [r for _, r in ratios if r < CALL_FLOOR]
        if low:
            raise CommschedError(f"launch_factor_points ratios must be at least {CALL_FLOOR}, got {low[0]!r}")
        object.__setattr__(self, "launch_factor_points", ratios)

    def factor_under_compute(self, nbytes) -> float:
        """factor(b) of ``under_compute`` (1 without points); numpy arrays give arrays."""
        if not self.under_compute:
            return 1.0 if np.ndim(nbytes) == 0 else np.ones(np.shape(nbytes))
        return interp_log2(self.under_compute, nbytes)

    def bucket_factor(self, nbytes):
        """factor(b) x ratio(b): ``under_compute`` and ``launch_factor_points`` (each 1 without
        points), the factor before d of an all-reduce launched from the backward pass while compute
        runs; numpy arrays give arrays."""
        if not self.launch_factor_points:
            return self.factor_under_compute(nbytes)
        return self.factor_under_compute(nbytes) * interp_log2(self.launch_factor_points, nbytes)

    @property
    def min_factor_under_compute(self) -> float:
        """A lower bound of every all-reduce's factor under compute, d included (planners prune with it)."""
        low = min([f for _, f in self.under_compute], default=1.0) * min([r for _, r in self.launch_factor_points], default=1.0)
        return low * CALL_FLOOR if self.call_overhead_s < 0 else low

    @property
    def compute_slowdown_many(self) -> float:
        """c2: compute's slowdown while two or more all-reduces run at once."""
        c2 = self.compute_slowdown_concurrent
        return self.compute_slowdown if c2 is None or self.threads == 1 else c2

    @property
    def contended(self) -> bool:
        ratios = any(r != 1.0 for _, r in self.launch_factor_points)
        return bool(self.compute_slowdown or self.comm_slowdown or self.call_overhead_s or self.under_compute or self.launch_compute_s or ratios)

    @property
    def serial_equivalent(self) -> bool:
        """True when the iteration is the serial (nccl) one: one thread, or several that share the
        link without gain, slow compute no more than one does and slow down alike under compute
        (one ``under_compute`` factor and one launch ratio for every size, and no d). Then the total work in flight
        evolves exactly as with one thread (the rates depend only on whether anything is in
        flight), so bucket end times may differ but the last one, the end of compute and hence the
        iteration time do not (a property test checks it)."""
        # d / T(b) makes the factor differ by size as well
        uniform = len({f for _, f in self.under_compute}) <= 1 and len({r for _, r in self.launch_factor_points}) <= 1 and not self.call_overhead_s
        return self.threads == 1 or (self.concurrency_gain == 0.0 and self.compute_slowdown_many == self.compute_slowdown and uniform)

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["under_compute"] = [list(p) for p in self.under_compute]
        doc["launch_factor_points"] = [list(p) for p in self.launch_factor_points]
        return doc


NCCL = Semantics()
GLOO = Semantics("gloo", threads=GLOO_DEFAULT_THREADS)


def semantics_from_json(doc: object, where: str = "semantics") -> Semantics:
    if not isinstance(doc, dict):
        raise CommschedError(f"{where}: expected an object, got {type(doc).__name__}")
    unknown = set(doc) - set(Semantics.__dataclass_fields__)
    if unknown:
        other = doc.get("schema")  # another of commsched's files given: say which, not just its first field
        raise CommschedError(f"{where}: unknown field {sorted(unknown)[0]!r}"
                             + (f"; this is a {other} file, not the semantics.json validate writes" if isinstance(other, str) else ""))
    try:
        doc = dict(doc)
        for key in ("under_compute", "launch_factor_points"):
            if isinstance(doc.get(key), list):
                doc[key] = tuple(tuple(p) if isinstance(p, list) else p for p in doc[key])
        return Semantics(**doc)
    except TypeError as e:
        raise CommschedError(f"{where}: {e}") from None
