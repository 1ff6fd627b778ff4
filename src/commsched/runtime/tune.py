"""Tuning inside the user's own training job: ``commsched.DataParallel(model, tune=True)``.

The wrapper *is* stock ``DistributedDataParallel`` with its default buckets; the training loop does
not change. In the job's first steps (its own data, loss and optimizer; every step a real training
step, none repeated or dropped) the :class:`Tuner`:

1. lets ``warmup_steps`` steps of stock DDP run (DDP's bucket rebuild happens in the second);
2. records ``calibration_steps`` steps of stock DDP (:class:`~commsched.runtime.record.StepRecorder`:
   every gradient's ready time, every bucket's launch and end) and times every step from its
   forward to the next; then runs a few small all-reduces on the job's process group, no larger
   than the model's gradients and only as many as fit tuning's budget (``max_cost``); where the
   calibration has already spent that budget, stock DDP's buckets stay and nothing is planned;
3. fits the iteration from those numbers (:func:`commsched.calibrate.in_job.fit_in_job`, the same
   profile combination as ``validate``'s), plans it (``optimal`` by default) and predicts stock DDP's
   defaults under the same model (:func:`commsched.planners.compare.recommend`);
4. where the plan is predicted at least ``min_gain`` faster, builds a second stock DDP over the same
   module with the plan's bucket caps (:func:`commsched.ddp_options`) and runs the two in
   alternating blocks (:mod:`commsched.calibrate.trial`): the plan is kept only when it measured
   faster with a 95% interval above 1;
5. once the first plan has its verdict and tuning's cost is still inside the budget, races the
   ``race_caps`` values of ``fallback_caps_mb`` (a user's hand sweep) the same model predicts
   fastest, whose buckets differ from the plan's, stock DDP's and each other's, one after another
   in the model's order, each against the plan measured best so far (the incumbent) whatever its
   prediction (the model cannot rank plans a few percent apart: docs/design.md, "Tuning inside the
   job"): a cap replaces the incumbent only where it measured faster than it with a 95% interval
   above 1, and is dropped once its median over 3 pairs or more is not above 1. While no plan has
   measured faster than stock DDP, a cap races stock DDP's defaults, and only if it is predicted
   faster than them at all. With no plan measured faster, stock DDP's default buckets stay;
6. from then on routes every forward to the DDP kept and lets the other go.

Rank 0 measures and decides; every rank follows its broadcast decision (the broadcasts wait at most
``timeout_s``: a rank that died during tuning is an error on the others, naming the phase). The
decision is printed in one line on rank 0 and written to the memory (``cache_dir``): ``decision.json``,
``plan.json``, ``ddp_options.json`` and ``report.html`` (predicted against measured for what was
tried). A restart of the same job (same parameters' names, shapes and dtypes, world size, backend,
cluster, DDP flags and strategy) reads it and applies the decision without calibrating, unless
``retune=True``.

Gradients are stock DDP's: both variants are stock DDP's own reducer (no comm hook), which scales
and sums each element the same way whatever bucket it is in; on two ranks the sum of two values is
the same in either order, so the parameters match stock DDP bit for bit (tests). With more ranks a
ring all-reduce may add an element's values in an order that depends on where it sits in its bucket,
as any change of ``bucket_cap_mb`` does.

A step is a forward with gradients on and its backward. Forwards under ``no_grad`` or ``no_sync()``
are not counted and run on the DDP of the step in progress (with ``find_unused_parameters``, a
forward with gradients on under ``no_sync()`` ends tuning: :meth:`Tuner.end_for_no_sync`). A forward with gradients on that no
backward follows (an evaluation forward outside ``no_grad``) leaves the reducer of the DDP that ran
it waiting for a backward; every DDP over the module hooks the same parameters, so another DDP's
backward would fire it too (a second all-reduce of every bucket, and with
``gradient_as_bucket_view`` an error). So the forward after it is part of the same step, on the same
DDP, as one stock DDP would run it. DDP broadcasts rank 0's buffers before a forward by a flag each
DDP sets in its own forward; the tuner hands it from one DDP to the next (:meth:`Tuner.route`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import math
import os
import socket
import statistics
import sys
import time
import warnings
import weakref
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from commsched.calibrate.cost_table import PROBE_SIZES as VALIDATE_PROBE_SIZES
from commsched.calibrate.cost_table import chain_length
from commsched.calibrate.in_job import Busy, InJobModel, fit_in_job, semantics_for, service_times
from commsched.calibrate.trial import TrialRule, clear_lower, pair_ratios, speedup_interval, verdict_of
from commsched.errors import CommschedError
from commsched.models.params import few
from commsched.planners.compare import plan_label, ranked_caps
from commsched.runtime.collectives import broadcast_bytes, comm_device, gather_text, wait_until
from commsched.runtime.ddp_plan import (
    check_plan_fits,
    compilable,
    ddp_options,
    trainable_parameters,
    unused_parameters,
    with_unused_parameters,
)
from commsched.types import Plan

SCHEMA = "commsched.tune/v1"
# validate's chain sizes up to 1 MiB (the per-call cost DDP's big buckets hide; the buckets measure
# the rest), each a chain of chain_length(size) calls as validate times them
PROBE_SIZES = tuple(s for s in VALIDATE_PROBE_SIZES if s <= 1 << 20)
PROBE_REPEATS = 2
# the race's candidates: the bucket_cap_mb values a user sweeps by hand (BENCHMARKS.md section 11)
FALLBACK_CAPS_MB = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0)
_DECISIONS = ("plan", "stock")


@dataclass(frozen=True)
class TuneConfig:
    """How :class:`Tuner` tunes (``commsched.DataParallel(model, tune=TuneConfig(...))``).

    ``keep``: ``"measured"`` (the trial decides), or ``"plan"``/``"stock"`` to keep that whatever
    the trial measures (the trial still runs and is reported: for tests, and for a user who wants
    the plan's numbers without its risk). ``total_steps``: how many steps the job will run, when
    known; a job shorter than ``min_job_steps`` is not tuned (stock DDP throughout). ``cache_dir``:
    the memory of decisions (default ``$COMMSCHED_TUNE_DIR``, else ``~/.cache/commsched/tune``; ``""``
    for none). ``cluster``: names the cluster in the memory's key (default: the ranks' host names).
    ``out_dir``: where the decision's files go (default: its entry in the memory). ``max_cost``: what
    tuning may cost before it has measured a gain, as a fraction of ``min_job_steps`` steps of stock
    DDP (:meth:`Tuner.cost_s`); the probes stop short of it, a calibration that reached it tries no
    plan, and a trial that reaches it keeps stock DDP's buckets.
    ``fallback_caps_mb``: the ``bucket_cap_mb`` values the race's caps are chosen from;
    ``race_caps``: how many of them (the model's first) race after the first plan (0, or no caps:
    no race; module docstring, 5). ``min_gain``: what a plan must be predicted to gain over stock
    DDP's defaults to be tried; 1%, not the 3% ``plan`` and ``plan_for`` ask before applying a plan
    unmeasured: here the trial measures it and the budget bounds what a plan that loses costs
    (docs/design.md)."""

    strategy: str = "optimal"
    warmup_steps: int = 3
    calibration_steps: int = 8
    min_gain: float = 0.01
    max_cost: float = 0.0075
    rule: TrialRule = field(default_factory=TrialRule)
    keep: Literal["measured", "plan", "stock"] = "measured"
    total_steps: int | None = None
    min_job_steps: int = 200
    cache_dir: str | None = None
    retune: bool = False
    cluster: str | None = None
    out_dir: str | None = None
    timeout_s: float = 300.0
    log: bool = True
    fallback_caps_mb: tuple[float, ...] = FALLBACK_CAPS_MB
    race_caps: int = 2

    def __post_init__(self) -> None:
        for k in ("warmup_steps", "calibration_steps", "min_job_steps", "race_caps"):
            v = getattr(self, k)
            lo = {"warmup_steps": 2, "race_caps": 0}.get(k, 1)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise CommschedError(f"TuneConfig.{k} must be a whole number >= {lo}, got {v!r}")
        if self.total_steps is not None and (isinstance(self.total_steps, bool) or not isinstance(self.total_steps, int) or self.total_steps < 1):
            raise CommschedError(f"TuneConfig.total_steps must be a positive whole number or None, got {self.total_steps!r}")
        for k in ("min_gain", "max_cost"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 1.0:
                raise CommschedError(f"TuneConfig.{k} must be a fraction in [0, 1), got {v!r}")
        for k in ("retune", "log"):
            if not isinstance(getattr(self, k), bool):
                raise CommschedError(f"TuneConfig.{k} must be True or False, got {getattr(self, k)!r}")
        for k in ("cache_dir", "out_dir"):
            v = getattr(self, k)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise CommschedError(f"TuneConfig.{k} must be a path or None, got {type(v).__name__} {v!r}")
        if self.cluster is not None and not isinstance(self.cluster, str):
            raise CommschedError(f"TuneConfig.cluster must be a name (str) or None, got {type(self.cluster).__name__} {self.cluster!r}")
        if not isinstance(self.rule, TrialRule):
            raise CommschedError(f"TuneConfig.rule must be a commsched.TrialRule, got {type(self.rule).__name__} {self.rule!r}")
        if self.keep not in ("measured", "plan", "stock"):
            raise CommschedError(f"TuneConfig.keep must be 'measured', 'plan' or 'stock', got {self.keep!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not 0 < self.timeout_s < 1e6:
            raise CommschedError(f"TuneConfig.timeout_s must be seconds in (0, 1e6), got {self.timeout_s!r}")
        caps = self.fallback_caps_mb
        if not isinstance(caps, (tuple, list)) or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0 for c in caps
        ):
            raise CommschedError(f"TuneConfig.fallback_caps_mb must be a tuple of MiB > 0, got {caps!r}")
        object.__setattr__(self, "fallback_caps_mb", tuple(float(c) for c in caps))
        from commsched.planners import planner

        planner(self.strategy)  # an unknown strategy is an error now, not after calibration

    def memory_dir(self) -> Path | None:
        d = self.cache_dir if self.cache_dir is not None else os.environ.get("COMMSCHED_TUNE_DIR")
        if d == "":
            return None
        return Path(os.fspath(d)) if d is not None else Path.home() / ".cache" / "commsched" / "tune"


# --- the clock ----------------------------------------------------------------------------------


class _Clock:
    """Stamps at each counted forward: host time on CPU; on CUDA an event on the current stream
    (host stamps would be launch times), read only when a period is needed."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.stamps: list = []

    def stamp(self) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.stamps.append(e)
        else:
            self.stamps.append(time.perf_counter())

    def period(self, k: int) -> float:
        """Seconds from stamp k to stamp k + 1."""
        a, b = self.stamps[k], self.stamps[k + 1]
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        return b - a


def probe_estimate_s(size: int, calls: int, probed: list[Busy], recorded: list[Busy]) -> float:
    """Seconds ``calls`` all-reduces of ``size`` bytes will take, estimated before they run (for
    :meth:`Tuner._probe`'s budget): the median time per call of the largest size probed so far,
    plus the bytes beyond it at the fastest rate any recorded stretch moved data (the probes run
    alone, as fast as the link goes). The per-call time comes from a probe, not from the buckets:
    a 16 KiB call on the emulated link pays a wake-up of about 2 ms that no bucket's rate shows."""
    if not probed:
        raise CommschedError("probe_estimate_s needs a size probed already (the smallest always runs)")
    top = max(b.bytes / b.calls for b in probed)
    per_call_s = statistics.median(b.seconds / b.calls for b in probed if b.bytes / b.calls == top)
    rates = [b.bytes / b.seconds for b in recorded if b.seconds > 0]
    extra_s = max(0.0, size - top) / max(rates) if rates else 0.0
    return calls * (per_call_s + extra_s)


# --- the tuner ----------------------------------------------------------------------------------


def signature(module: nn.Module, world: int, backend: str, cluster: str, flags: dict, strategy: str) -> str:
    """The memory's key: what must match for a decision to hold again."""
    params = [(n, list(p.shape), str(p.dtype)) for n, p in trainable_parameters(module).items()]
    doc = {"params": params, "world": world, "backend": backend, "cluster": cluster, "flags": flags, "strategy": strategy}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _buckets(plan: Plan) -> str:
    n = len(plan.buckets)
    return f"{n} bucket" + ("" if n == 1 else "s")


def _release_at_exit(tuner_ref: weakref.ref) -> None:
    """At interpreter exit, while Python still runs: the tuner's own DDPs and recorder let go and
    collected. Left to the interpreter's teardown, their reducers and gloo's work objects were
    destroyed after Python had stopped, and 3 of 14 two-rank gloo jobs that ended while tuning
    aborted there ("terminate called without an active exception", SIGABRT: a failed job to
    torchrun) where 0 of 10 did with them released first (docs/limitations.md)."""
    tuner = tuner_ref()
    if tuner is None:
        return
    if tuner.recorder is not None:
        with contextlib.suppress(Exception):  # the process group may be gone: nothing to restore then
            tuner.recorder.remove()
    tuner.recorder = tuner.plan_ddp = tuner.incumbent_ddp = tuner.active = None
    del tuner
    gc.collect()


class Tuner:
    """Drives one :class:`~commsched.runtime.data_parallel.DataParallel` through tuning (module docstring).

    :meth:`route` is called at every forward of the wrapper and returns the DDP that runs it (None:
    the wrapper's own, stock DDP's defaults). Steps that reduce (gradients enabled, outside
    ``no_sync()``) are the tuner's steps; others run on the DDP in use and are not counted."""

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, cfg: TuneConfig, ddp_kwargs: dict, find_unused: bool, group, rank: int):
        self.cfg = cfg
        self._ddp_ref = ddp
        self.module = ddp.module
        self.group = group
        self.rank = rank
        self.world = dist.get_world_size(group)
        self.ddp_kwargs = dict(ddp_kwargs)
        self.find_unused = find_unused
        self.device = comm_device(group, self.module)
        params = trainable_parameters(self.module)
        self.names = tuple(params)
        self.sizes = {n: p.numel() * p.element_size() for n, p in params.items()}
        self.cuda = any(p.is_cuda for p in params.values())
        self.clock = _Clock(self.cuda)
        self.backend = self._backend()
        self.phase: str = "warmup"
        self.step = 0  # counted steps so far
        self.variant_of: list[str] = []  # per counted step: "stock" or "plan"
        self.recorder = None
        self.plan_ddp: nn.parallel.DistributedDataParallel | None = None  # the plan's, kept across switches
        # with find_unused_parameters a reducer left idle must not run again (module docstring): each
        # switch then builds the variant's DDP afresh, and the wrapper's own runs only before the first
        self.fresh_per_switch = find_unused
        self.active: nn.Module | None = None  # the DDP forwards go to (None: the wrapper's own)
        self.active_variant = "stock"
        atexit.register(_release_at_exit, weakref.ref(self))
        self.plan = None
        self.stock_plan = None
        # the caps still to race after the first plan's trial (module docstring, 5), in the model's
        # order, each with whether the model predicts it faster than stock DDP's defaults
        self.challengers: list[tuple] = []
        # the plan measured best so far, once one measured faster than stock DDP: the next cap races it
        self.incumbent = None
        self.incumbent_ddp: nn.parallel.DistributedDataParallel | None = None
        self.trial_plan = None  # the plan of the current (or last) trial, and what it raced
        self.trial_against = "stock"
        self.trials: list[dict] = []  # the trials that ended with another plan to try after them
        self.tried_plans: list = []  # their plans
        self.model: InJobModel | None = None
        self.comparison = None
        self.trial_start = 0  # first counted step of the trial's pairs
        self.pairs = 0
        self.pairs_before = 0  # the pairs of the trials before this one
        self.last_why = ""  # the last verdict's own words (reason adds the trial before it)
        self.last_speedup: dict | None = None  # the last trial's measured speedup, against its baseline
        self.ratios: list[float] = []
        self.decision: str | None = None
        self.reason = ""
        self.own_s = 0.0  # host seconds in the tuner's own work (fits, plans, probes, broadcasts)
        self.own_by_step: list[float] = []  # of it, per counted step (the part inside route)
        self._route_t0: float | None = None  # when the route in progress began
        self.decided_at: int | None = None
        self.entry: Path | None = None
        self.key = ""
        self.summary: dict = {}
        # whether a backward ran since the last counted forward (route): a forward with gradients on
        # and no backward (an evaluation forward outside no_grad) leaves the reducer of the DDP that
        # ran it waiting for one, and another DDP's backward would fire it too (module docstring)
        self.backward_seen = True
        self._grad_hooks: list = []
        t = time.perf_counter()
        self._agree_on_config()
        self._load_memory()
        empty = [n for n, p in params.items() if p.numel() == 0]
        if empty and self.phase != "done":  # the same model on every rank: every rank stops here alike
            self._finish("stock", f"the model has trainable parameter(s) without elements ({few(empty)}), which DDP reduces but a plan's "
                                  "buckets cannot hold (0 bytes): not tuned", remember=False)
        if self.phase != "done":
            self._grad_hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in params.values()]
        self.own_s += time.perf_counter() - t

    def _on_grad(self, _param: torch.Tensor) -> None:
        self.backward_seen = True

    # --- what runs each step ---------------------------------------------------------------------

    @torch._disable_dynamo  # tuning's own work, called from a compiled model's forward: never traced
    def route(self, counted: bool, joining: bool = False, accumulating: bool = False) -> nn.Module | None:
        """The DDP for this forward (None: the wrapper's own); counted steps advance the tuning.
        ``joining``: a ``Join`` context is in effect over the wrapper, which ends tuning (:meth:`end_for_join`).
        ``accumulating``: a forward with gradients on under ``no_sync()``, which with
        ``find_unused_parameters`` ends tuning (:meth:`end_for_no_sync`)."""
        if joining:
            self.end_for_join()
        if accumulating and self.fresh_per_switch:
            self.end_for_no_sync()
        if not counted or self.phase == "done":
            return self.active
        if not self.backward_seen:  # the last counted forward had no backward: this one is the same step, on its DDP
            return self.active
        if tuple(trainable_parameters(self.module)) != self.names:  # requires_grad changed (a GAN's frozen half, unfreezing)
            self.end_for_trainable_change()
            return self.active
        self.backward_seen = False
        self.clock.stamp()
        t = self._route_t0 = time.perf_counter()
        try:
            with self._buffer_flag_handed_on():
                variant = self._advance()
                self._switch(variant)
        finally:
            self._route_t0 = None
            self.own_s += time.perf_counter() - t
            self.own_by_step.append(time.perf_counter() - t)
        self.variant_of.append(variant)
        self.step += 1
        return self.active

    def end_for_join(self) -> None:
        """End tuning where it is, once an enabled ``Join`` over the wrapper (uneven inputs) exists:
        a rank out of inputs shadows the collectives of one DDP until every rank is, so the DDP in
        use must stop changing. Every rank calls this at the same step: its first forward after the
        ``Join`` was built, or, out of inputs before it, its first shadowing of one or the context's
        end (``DataParallel.join_hook``). A decision made stands; else the plan measured fastest so
        far against stock DDP's defaults (a race's winner), else stock DDP's default buckets; either
        is not remembered (no verdict was reached)."""
        if self.phase == "done":
            return
        why = f"join() began after {self.step} steps, before tuning decided: a rank out of inputs shadows one DDP's collectives"
        self._end_early(why, "join()", winner=True)

    def end_for_no_sync(self) -> None:
        """End tuning at a forward with gradients on under ``no_sync()`` (a micro-batch accumulated
        before the step's synced one) where the DDPs tuning switches to are built afresh
        (``find_unused_parameters``): a reducer counts a parameter as used where any micro-batch of
        the step used it, on the DDP that ran that micro-batch, so a DDP built at the synced
        micro-batch would leave a parameter only the others used un-averaged, and the ranks'
        replicas would drift apart. The switch to the DDP kept happens here, before this micro-batch,
        so the step runs on one DDP, as on stock DDP. A decision made stands; else the plan measured
        fastest so far against stock DDP's defaults, else stock DDP's default buckets; neither is
        remembered. Every rank calls it at the same forward (the loop's micro-batches are every rank's)."""
        if self.phase == "done":
            return
        why = (f"a micro-batch under no_sync() came after {self.step} steps, before tuning decided: with find_unused_parameters "
               "each DDP tuning switches to is built afresh, and one built after it would not count the parameters it used")
        self._end_early(why, "no_sync()", winner=True)

    def end_for_trainable_change(self) -> None:
        """End tuning, between steps, where the parameters that require a gradient are no longer
        those the wrapper was built with: the DDPs tuning builds would reduce another set than the
        one stock DDP's reducer holds. Stock DDP's default buckets stay, not remembered."""
        now, built = set(trainable_parameters(self.module)), set(self.names)
        parts = [f"{what} {few(names)}" for what, names in (("frozen:", sorted(built - now)), ("unfrozen:", sorted(now - built))) if names]
        why = (f"the parameters that require a gradient changed after {self.step} step{'s' if self.step != 1 else ''}, before tuning "
               f"decided ({'; '.join(parts)}): stock DDP's reducer keeps the set it was built with")
        self._end_early(why, "a change of requires_grad", winner=False)

    def end_for_comm_hook(self) -> None:
        """A comm hook is being registered on the wrapper: the hook issues the all-reduces, which
        tuning neither records nor measures, so stock DDP's default buckets stay, whatever tuning
        decided, read from memory or was still measuring; the hook goes on the DDP then in use
        (:meth:`DataParallel.register_comm_hook`). Called between steps, as hooks are registered."""
        self._back_to_stock("a comm hook was registered on the model (it issues the all-reduces, which tuning does not measure)", "a comm hook")

    def end_for_static_graph(self) -> None:
        """``_set_static_graph()`` called on the wrapper after it was built (DDP takes it before the
        first step only): the DDPs tuning builds take the constructor's flags, so stock DDP's default
        buckets stay, on the wrapper's own DDP (static now) or, with ``find_unused_parameters``, one
        built static afresh, whatever tuning decided or read from memory; not remembered."""
        self.ddp_kwargs["static_graph"] = True
        self._back_to_stock("static_graph was set after the model was wrapped (_set_static_graph()), which the DDPs tuning "
                            "builds do not take: pass static_graph=True to commsched.DataParallel to tune", "_set_static_graph()")

    def _back_to_stock(self, why: str, what: str) -> None:
        """Stock DDP's default buckets from now on: tuning ends (not remembered), or a plan kept goes."""
        if self.phase != "done":
            self._end_early(why, what, winner=False)
        elif self.decision == "plan":
            with self._buffer_flag_handed_on():
                self.decision, self.reason = "stock", why
                self._switch("stock")
                self.plan_ddp = None
            if self.rank == 0 and self.cfg.log:
                print(f"commsched tune: back to stock DDP's default buckets: {why}", file=sys.stderr, flush=True)

    def _end_early(self, why: str, what: str, *, winner: bool) -> None:
        """End tuning before its decision, not remembered: with the plan measured fastest so far
        against stock DDP's defaults where ``winner`` allows and a race has one, else stock DDP's
        default buckets."""
        decision = "stock"
        if self.phase == "trial":  # the trial in progress has no verdict: its record says why
            self.last_speedup, self.last_why = None, f"ended by {what} before its verdict"
        if winner and self.incumbent is not None:  # measured faster than stock DDP's defaults in its own trial
            decision = self._keep_incumbent()
            why += ", so tuning ends with the plan measured fastest so far (not remembered)"
        else:
            why += ", so tuning ends with stock DDP's default buckets (not remembered)"
        self.incumbent = self.incumbent_ddp = None
        with self._buffer_flag_handed_on():
            self._finish(decision, why, remember=False)

    @contextlib.contextmanager
    def _buffer_flag_handed_on(self):
        """DDP broadcasts rank 0's buffers before a forward by a flag each DDP sets in its own forward
        (off after one under no_sync or no_grad): the DDP in use after a switch takes it from the one
        before, as one stock DDP would keep it."""
        sync_buffers = self._running().require_forward_param_sync
        yield
        self._running().require_forward_param_sync = sync_buffers

    def _running(self) -> nn.Module:
        """The DDP forwards go to: the one in use, else the wrapper itself."""
        return self.active if self.active is not None else self._ddp_ref

    def _switch(self, variant: str) -> None:
        """Make ``variant``'s DDP the one in use (between steps: gradients are the user's then)."""
        if variant == self.active_variant and (self.active is not None or variant == "stock"):
            return
        if not self.fresh_per_switch:
            self.active = {"plan": self.plan_ddp, "incumbent": self.incumbent_ddp}.get(variant)
        else:
            self.active = None  # the previous one goes first: its reducer's hooks with it
            self.active = self._new_ddp({"plan": self.plan, "incumbent": self.incumbent}.get(variant))
        self.active_variant = variant

    def _advance(self) -> str:
        cfg, k = self.cfg, self.step
        if self.phase == "warmup":
            if cfg.total_steps is not None and cfg.total_steps < cfg.min_job_steps:
                self._finish("stock", f"the job runs {cfg.total_steps} steps, fewer than min_job_steps ({cfg.min_job_steps}): not tuned")
                return "stock"
            if k == cfg.warmup_steps - 1:  # the recorder goes on now: this step's record is dropped
                if not self._start_recording():
                    return "stock"
                self.phase = "calibrate"
            return "stock"
        if self.phase == "calibrate":
            if k < cfg.warmup_steps + cfg.calibration_steps:
                return "stock"
            return self._calibrate_and_plan()
        if self.phase == "trial":
            return self._trial_step()
        raise AssertionError(self.phase)

    # --- phase 2-3: calibrate and plan ---------------------------------------------------------

    def _start_recording(self) -> bool:
        from commsched.runtime.record import StepRecorder

        ddp = self._ddp_ref
        if getattr(ddp, "_comm_hooks", None) or ddp._get_ddp_logging_data().get("comm_hook"):
            self._finish("stock", "a comm hook is registered on the model: tuning records DDP's own all-reduces, so it keeps stock DDP")
            return False
        self.recorder = StepRecorder(ddp, order=self.names)
        # attached inside this step's forward, after its pre-hooks: start the step's record by hand
        # (it is dropped anyway; its forward began before the stamp)
        self.recorder._on_forward_start(ddp, ())
        return True

    def _calibrate_and_plan(self) -> str:
        cfg = self.cfg
        first = cfg.warmup_steps  # the step after the one during which the recorder was attached
        records = list(self.recorder.records)[1:]
        self.recorder.remove()
        self.recorder_own_s = self.recorder.own_s
        self.recorder = None
        periods = [self.clock.period(k) for k in range(first, first + len(records))]
        probes = self._probe(cfg.timeout_s, service_times(records))
        payload: bytes | None = None
        if self.rank == 0:
            spent, budget = self.cost_s(), self.budget_s()
            if cfg.keep == "measured" and spent > budget:  # no room left for a trial: no plan either
                payload = json.dumps({"stop": self._over_budget(spent, budget, "before planning")}).encode()
            else:
                try:
                    payload = json.dumps(self._plan_doc(records, periods, probes)).encode()
                except Exception as e:  # noqa: BLE001 - every rank must hear of it, or they wait for the plan
                    if isinstance(e, CommschedError) and "probes_skipped_bytes" in self.summary:  # the budget left too few sizes
                        payload = json.dumps({"stop": f"the probes tuning's budget allowed and the recorded buckets are too few to fit the all-reduce cost ({e})"}).encode()
                    else:
                        payload = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
        doc = json.loads(broadcast_bytes(payload, self.group, self.device, self.rank, cfg.timeout_s, "tuning's plan"))
        if "stop" in doc:
            self._finish("stock", doc["stop"])
            return "stock"
        if "error" in doc:  # the job goes on with stock DDP: tuning never stops training
            warnings.warn(f"commsched tune: planning failed on rank 0 ({doc['error']}); keeping stock DDP's buckets", stacklevel=4)
            self._finish("stock", f"planning failed on rank 0: {doc['error']}")
            return "stock"
        from commsched.formats.io import plan_from_json

        self.plan = plan_from_json(doc["plan"], where="tuning's plan")
        self.stock_plan = plan_from_json(doc["stock"], where="tuning's stock plan")
        self.challengers = [
            (plan_from_json(c, where="tuning's race"), bool(p["beats_stock"]))
            for c, p in zip(doc.get("challengers") or [], doc["predicted"].get("challengers") or [])
        ]
        self.summary["predicted"] = doc["predicted"]
        if not doc["try"]:
            self._finish("stock", doc["reason"])
            return "stock"
        if not self.fresh_per_switch:
            try:
                self.plan_ddp = self._new_ddp(self.plan)
            except CommschedError as e:  # the same model on every rank: every rank stops here alike
                self._finish("stock", f"{plan_label(self.plan)} cannot be applied to the model ({e}): tuning keeps stock DDP")
                return "stock"
        self.phase = "trial"
        self.trial_plan = self.plan
        self.trial_start = self.step + cfg.rule.block  # one block of the plan first, not timed: DDP's rebuild
        return "plan"

    def _probe(self, timeout_s: float, recorded: list[Busy]) -> list[Busy]:
        """Small all-reduces on the job's group, timed as ``validate`` times its cost table and as
        DDP runs its buckets: chains of ``chain_length(size)`` calls launched back to back and waited
        for together (:mod:`commsched.calibrate.cost_table`), ``PROBE_REPEATS`` chains of each size
        after one untimed call (which also lines the ranks up). One all-reduce timed alone would
        measure the idle link's wake-up too, which DDP's queue of buckets partly hides. Each chain
        waits at most ``timeout_s`` (``validate``'s chains wait as long as the group's timeout).

        Sizes larger than every gradient together are not probed (no bucket can be larger), and the
        probes spend at most what tuning may cost: before each size after the smallest, rank 0
        estimates its chains (:func:`probe_estimate_s`) and, where they would take tuning past its
        budget, every rank stops probing (one small all-reduce carries rank 0's word). On a slow
        link with short steps the 1 MiB chains alone can cost more than tuning may spend."""
        total = sum(self.sizes.values())
        sizes = [s for s in PROBE_SIZES if s <= max(total, PROBE_SIZES[0])]
        points: list[Busy] = []
        for i, size in enumerate(sizes):
            calls = 1 + PROBE_REPEATS * chain_length(size)
            if i:  # the smallest always runs: the cheapest, and with the buckets it makes a fit possible
                fits = True
                if self.rank == 0:
                    fits = self.cost_s() + probe_estimate_s(size, calls, points, recorded) <= self.budget_s()
                if not self._agree(fits, timeout_s):
                    self.summary["probes_skipped_bytes"] = sizes[i:]
                    break
            xs = [torch.zeros(size // 4, dtype=torch.float32, device=self.device) for _ in range(chain_length(size))]
            for k in range(PROBE_REPEATS + 1):
                chain = xs if k else xs[:1]
                if self.cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                works = [dist.all_reduce(x, group=self.group, async_op=True) for x in chain]
                deadline = time.monotonic() + timeout_s
                for work in works:
                    wait_until(work, deadline, "tuning's all-reduce probes", self.rank, "a peer rank has probably died")
                if self.cuda:
                    torch.cuda.synchronize()
                if k:
                    points.append(Busy(len(chain), len(chain) * size, time.perf_counter() - t))
        return points

    def _agree(self, ok: bool, timeout_s: float) -> bool:
        """Rank 0's yes or no on every rank (the others' ``ok`` is not read)."""
        flag = torch.tensor([0 if ok or self.rank != 0 else 1], dtype=torch.int32, device=self.device)
        work = dist.all_reduce(flag, group=self.group, async_op=True)
        wait_until(work, time.monotonic() + timeout_s, "tuning's all-reduce probes", self.rank, "a peer rank has probably died")
        return int(flag.item()) == 0

    def _plan_doc(self, records, periods, probes) -> dict:
        """Rank 0: fit, plan, predict stock DDP's defaults, and whether to try the plan."""
        from commsched.cost.cluster import ClusterSpec
        from commsched.formats.io import plan_to_json, profile_to_json
        from commsched.planners import planner_for
        from commsched.planners.compare import compare

        model = fit_in_job(records, periods, self.sizes, probes, model=type(self.module).__name__)
        self.model = model
        profile = model.profile
        if self.find_unused:
            profile = with_unused_parameters(profile, self.module, True)
        # only static_graph runs DDP without find_unused_parameters over parameters a step leaves
        # without a gradient (else DDP itself stops at the next step): a plan would leave them out
        elif self.ddp_kwargs.get("static_graph") and (unused := unused_parameters(profile, self.module)):
            return {"stop": f"{len(unused)} trainable parameter(s) got no gradient in the recorded steps ({few(unused)}) and DDP runs them "
                            "under static_graph, without find_unused_parameters: a plan's buckets would leave them out, so tuning keeps "
                            "stock DDP's"}
        sem = semantics_for(self.backend, model.comm_slowdown)
        cluster = ClusterSpec(
            name=f"in-job-{self.world}x-{self.backend}", workers=self.world, allreduce=model.cost,
            source=f"fitted by commsched tune to {len(records)} of the job's own stock DDP steps and {sum(p.calls for p in probes)} small all-reduces",
        )
        # the plan, stock DDP's default buckets and the recommendation, all scored under the in-job model
        cmp = self.comparison = compare(profile, cluster, [planner_for(self.cfg.strategy, sem)], sem, self.cfg.min_gain)
        (chosen,) = cmp.results.values()
        assert cmp.stock is not None
        plan, stock = chosen.plan, cmp.stock.plan
        same = plan.strategy in cmp.stock_names
        try_it = not same and (self.cfg.keep != "measured" or not cmp.recommended.stock_kept)  # keep fixed: tried to be reported
        spent, budget = (self.cost_s(), self.budget_s()) if try_it and self.cfg.keep == "measured" else (0.0, math.inf)
        over_budget = spent > budget  # a trial could not even start inside the budget
        if over_budget:
            try_it = False
        if same:
            reason = f"{plan.strategy} is stock DDP's default buckets"
        elif over_budget:
            reason = self._over_budget(spent, budget, f"before {plan.strategy} ({_buckets(plan)}, predicted {chosen.speedup_vs_ddp - 1:+.1%}) could be tried")
        elif try_it:
            reason = f"{plan.strategy} ({_buckets(plan)}) predicted {chosen.speedup_vs_ddp - 1:+.1%}: trying it"
        else:
            reason = (f"stock DDP's default buckets: {plan.strategy} ({_buckets(plan)}) is predicted {chosen.speedup_vs_ddp - 1:+.1%} "
                      f"against them, under tuning's min gain of {self.cfg.min_gain:.1%}: not tried")
        predicted = {
            "plan_s": chosen.timeline.iteration_s, "stock_s": cmp.stock.timeline.iteration_s,
            "plan_bucket_bytes": [b.bytes for b in plan.buckets], "model": model.to_json(), "profile": profile_to_json(profile),
        }
        race: list = []
        if try_it and self.cfg.keep == "measured" and self.cfg.race_caps:
            try:  # caps that cannot be ranked must not keep the first plan from its trial
                # the caps the model ranks first, predicted faster than stock DDP or not: they race
                # a plan that won whatever their prediction, and follow one that lost only if predicted faster
                race = ranked_caps(profile, model.cost, sem, self.cfg.fallback_caps_mb, (plan, stock), math.inf)[: self.cfg.race_caps]
            except CommschedError as e:
                predicted["race_error"] = str(e)
            predicted["challengers"] = [
                {"label": plan_label(c), "plan_s": c_s, "bucket_bytes": [b.bytes for b in c.buckets], "beats_stock": c_s < cmp.stock.timeline.iteration_s}
                for c, c_s in race
            ]
        return {
            "plan": plan_to_json(plan), "stock": plan_to_json(stock), "try": try_it, "reason": reason, "predicted": predicted,
            "challengers": [plan_to_json(c) for c, _ in race],
        }

    def _over_budget(self, spent: float, budget: float, when: str) -> str:
        ref = self._reference_s() or 0.0
        return (f"tuning's calibration cost {spent:.2f} s, more than its budget of {budget:.2f} s ({self.cfg.max_cost:.2%} of "
                f"{self.cfg.min_job_steps} steps of {ref * 1e3:.0f} ms), {when}: steps this short leave no room for a trial")

    def _new_ddp(self, plan) -> nn.parallel.DistributedDataParallel:
        """Stock DDP over the wrapper's module with ``plan``'s caps (None: DDP's defaults), the user's
        other DDP arguments, no second broadcast of the weights; over the parameters that required a
        gradient when the wrapper was built (:meth:`_as_built`), as the wrapper's own reducer holds."""
        opts: dict = {"find_unused_parameters": self.find_unused}
        with self._as_built():
            if plan is not None:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    opts = ddp_options(plan, self.module, find_unused_parameters=self.find_unused, static_graph=bool(self.ddp_kwargs.get("static_graph")))
                self.summary["inexact"] = [str(w.message) for w in caught]
                opts.setdefault("find_unused_parameters", self.find_unused)
            kwargs = {k: v for k, v in self.ddp_kwargs.items() if k not in opts}
            return compilable(nn.parallel.DistributedDataParallel(self.module, process_group=self.group, init_sync=False, **kwargs, **opts))

    @contextlib.contextmanager
    def _as_built(self):
        """The module's ``requires_grad`` flags as they were when the wrapper was built, restored on
        exit: DDP takes the parameters that require a gradient as it is built, and a DDP tuning builds
        after the loop froze or unfroze some (ending tuning on stock DDP, with
        ``find_unused_parameters``) must reduce what stock DDP's reducer does, not what is trainable
        at that step (a frozen half left out of it for good, or no parameter at all)."""
        ignored = set(getattr(self.module, "_ddp_params_and_buffers_to_ignore", ()) or ())
        built = set(self.names)
        changed = [p for n, p in self.module.named_parameters() if n not in ignored and p.requires_grad != (n in built)]
        for p in changed:
            p.requires_grad_(not p.requires_grad)
        try:
            yield
        finally:
            for p in changed:
                p.requires_grad_(not p.requires_grad)

    # --- phase 4: the trial ----------------------------------------------------------------------

    def _trial_step(self) -> str:
        """The variant of the current step: the plan's untimed first block, then pairs of blocks,
        the baseline first in even pairs and the plan first in odd ones (a linear drift cancels).
        The baseline is stock DDP's defaults, or the plan measured best so far where a cap races
        it ("incumbent")."""
        rule, k = self.cfg.rule, self.step
        if k < self.trial_start:
            return "plan"
        i = k - self.trial_start
        pair, within = divmod(i, 2 * rule.block)
        if within == 0 and pair > 0:  # the pair before is complete: its last period closed at this stamp
            self.pairs = pair
            done = self._decide_after_pair()
            if done:
                return "plan" if self.decision == "plan" else "stock"
            if k < self.trial_start:  # the next plan's first block begins
                return "plan"
        base = "stock" if self.incumbent is None else "incumbent"
        first, second = (base, "plan") if pair % 2 == 0 else ("plan", base)
        return first if within < rule.block else second

    def _blocks(self) -> tuple[list[list[float]], list[list[float]]]:
        rule = self.cfg.rule
        stock, plan = [], []
        for p in range(self.pairs):
            base = self.trial_start + p * 2 * rule.block
            for b in range(2):
                ks = range(base + b * rule.block, base + (b + 1) * rule.block)
                times = [self.clock.period(k) for k in ks]
                (plan if self.variant_of[ks[0]] == "plan" else stock).append(times)
        return stock, plan

    def _baseline(self) -> str:
        """What the current trial's plan is measured against, in words."""
        return "stock DDP's defaults" if self.trial_against == "stock" else f"{self.trial_against}'s buckets"

    def _decide_after_pair(self) -> bool:
        """Rank 0's verdict after each pair, broadcast: the trial's rule, or the baseline once
        tuning has cost more than ``max_cost`` (:meth:`budget_s`) without a verdict for the plan.
        The first check comes after the first pair, not before: a good plan must get a pair to
        start paying back the probes and its first block. Where a trial has a verdict either way
        inside the budget and a cap is left to race, the cap's trial follows: against the winner
        so far where there is one, else against stock DDP's defaults where the cap is predicted
        faster than them (module docstring, 5)."""
        payload = None
        if self.rank == 0:
            stock, plan = self._blocks()
            self.ratios = pair_ratios(stock, plan)
            med, lo, hi = speedup_interval(self.ratios, self.cfg.rule.resamples, self.cfg.rule.seed)
            clear_lo = clear_lower(self.ratios, self.cfg.rule)
            race = self.incumbent is not None  # against a plan that measured faster than stock DDP (module docstring, 5)
            doc: dict = {"verdict": verdict_of(len(self.ratios), lo, hi, self.cfg.rule, clear_lo=clear_lo, median=med if race else None)}
            doc["measured_speedup"] = {"median": med, "ci95": [lo, hi], "pairs": len(self.ratios), "against": self.trial_against}
            doc["why"] = f"measured {med:.3f}x [{lo:.3f}, {hi:.3f}] over {self._baseline()} in {len(self.ratios)} pairs of {self.cfg.rule.block} steps"
            if doc["verdict"] == "plan" and len(self.ratios) < self.cfg.rule.min_pairs_keep:  # kept on the t interval: a clear gain
                doc["measured_speedup"]["t_lower"] = clear_lo
                doc["why"] += f" (a clear gain: its t interval's lower end {clear_lo:.3f})"
            elif race and doc["verdict"] == "stock" and hi >= 1.0 and not med > 1.0:  # dropped on its median, not its interval
                doc["why"] += ": no gain over it, so it stays"
            cost, budget = self.cost_s(), self.budget_s()
            if doc["verdict"] != "plan" and cost > budget:
                doc["verdict"] = "stock"
                doc["why"] = (f"tuning cost {cost:.2f} s, more than its budget of {budget:.2f} s ({self.cfg.max_cost:.2%} of "
                              f"{self.cfg.min_job_steps} steps), before {plan_label(self.plan)} measured faster than {self._baseline()} ({doc['why']})")
            elif doc["verdict"] is not None and self.challengers and cost <= budget:
                winner = doc["verdict"] == "plan" or self.incumbent is not None
                if winner or self.challengers[0][1]:  # no winner yet: the cap must be predicted faster than stock DDP
                    doc["next"], doc["verdict"] = doc["verdict"], None  # the next cap's turn, against the winner
            payload = json.dumps(doc).encode()
        doc = json.loads(broadcast_bytes(payload, self.group, self.device, self.rank, self.cfg.timeout_s, "tuning's verdict"))
        v = doc["verdict"]
        if doc.get("next"):
            self._start_next_trial(doc, won=doc["next"] == "plan")
            return False
        if v is None:
            return False
        self.last_speedup, self.last_why = doc["measured_speedup"], doc["why"]
        self.summary["measured_speedup"] = doc["measured_speedup"]
        keep = v if self.cfg.keep == "measured" else self.cfg.keep
        why = doc["why"] + ("" if keep == v else f"; keeping {keep} as asked (keep={self.cfg.keep!r})")
        if self.trials:  # every trial in order, each in its own words
            why = "; then ".join([*(f"{t['plan']}: {t['why']}" for t in self.trials), f"{plan_label(self.plan)}: {why}"])
        if self.incumbent is not None and keep == "stock":  # the last cap did not beat the winner: the winner stays
            keep = self._keep_incumbent()
        self.incumbent = self.incumbent_ddp = None
        self._finish(keep, why)
        return True

    def _keep_incumbent(self) -> str:
        """Make the plan measured best so far (the race's winner) the plan kept, with its DDP and
        its own trial's speedup; the decision ("plan") for :meth:`_finish`."""
        label = plan_label(self.incumbent)
        self.summary["measured_speedup"] = next(t["measured_speedup"] for t in reversed(self.trials) if t["plan"] == label)
        self.plan, self.plan_ddp = self.incumbent, self.incumbent_ddp
        self.active_variant = "none"  # _finish's switch goes to the winner's DDP whatever ran last
        return "plan"

    def _start_next_trial(self, doc: dict, won: bool) -> None:
        """A trial has its verdict and a cap is left to race: remember the trial, make the winner so
        far the incumbent (the plan just tried where it ``won``, with its DDP; else the incumbent
        before it, if any) and the next cap the plan tried, its first block (not timed) from this
        step on, against the incumbent, or against stock DDP's defaults where there is none."""
        steps = self._trial_steps() if self.rank == 0 else {"stock_steps_s": [], "plan_steps_s": []}  # rank 0 measures (on CUDA: no event syncs elsewhere)
        self.trials.append(self._trial_record(doc["measured_speedup"], doc["why"], steps))
        nxt, _ = self.challengers.pop(0)
        if self.rank == 0 and self.cfg.log:
            what = f"measured faster than {self._baseline()}" if won else f"did not measure faster than {self._baseline()}"
            against = f"{plan_label(self.plan)}'s buckets" if won else self._baseline()
            print(f"commsched tune: {plan_label(self.plan)} {what} ({doc['why']}); racing {plan_label(nxt)} ({_buckets(nxt)}) "
                  f"against {against}", file=sys.stderr, flush=True)
        self.tried_plans.append(self.plan)
        if won:  # a previous incumbent and its DDP go
            self.incumbent, self.incumbent_ddp = self.plan, self.plan_ddp
        self.plan = nxt
        self.trial_plan, self.trial_against = self.plan, plan_label(self.incumbent) if self.incumbent is not None else "stock"
        self.plan_ddp = None  # a losing plan's buckets go with it
        if not self.fresh_per_switch:
            self.plan_ddp = self._new_ddp(self.plan)
        self.active_variant = "none"  # the step's switch goes to the new plan's DDP whatever ran before
        self.pairs_before += self.pairs
        self.pairs = 0
        self.trial_start = self.step + self.cfg.rule.block

    # --- what tuning costs -----------------------------------------------------------------------

    def _reference_s(self) -> float | None:
        """Stock DDP's median step from the calibration on (the steps tuning is measured against)."""
        c0 = self.cfg.warmup_steps
        stock = [self.clock.period(k) for k in range(c0, len(self.clock.stamps) - 1) if self.variant_of[k] == "stock"]
        return statistics.median(stock) if stock else None

    def cost_s(self) -> float:
        """Seconds tuning has cost so far against stock DDP's defaults throughout: the steps run off
        them (the plan tried, or the first plan it races), each less stock DDP's median step
        (``_reference_s``; the plan's first step carries the probes and the planning), and the
        tuner's own work inside stock DDP's steps (the recorder's hooks, switches, broadcasts, the
        route in progress). Stock steps themselves cost nothing: they are what the job would have run."""
        ref = self._reference_s()
        if ref is None:
            return self.own_s
        c0 = self.cfg.warmup_steps
        last = len(self.clock.stamps) - 1  # periods known: up to the last stamp
        cost = getattr(self, "recorder_own_s", 0.0)
        for k in range(c0, len(self.variant_of)):
            if self.variant_of[k] != "stock":  # the plan tried, or the first plan it races
                cost += (self.clock.period(k) - ref) if k < last else self.own_by_step[k]
            else:
                cost += self.own_by_step[k]
        if self._route_t0 is not None:
            cost += time.perf_counter() - self._route_t0
        return cost

    def budget_s(self) -> float:
        """``max_cost`` of ``min_job_steps`` stock DDP steps."""
        ref = self._reference_s() or 0.0
        return self.cfg.max_cost * self.cfg.min_job_steps * ref

    # --- the decision ----------------------------------------------------------------------------

    def _finish(self, decision: str, reason: str, *, from_memory: bool = False, remember: bool = True) -> None:
        self.decision, self.reason = decision, reason
        self.phase = "done"
        self.decided_at = self.step
        if self.recorder is not None:  # calibrating still: its own time is the tuner's cost too
            self.recorder.remove()
            self.recorder_own_s = self.recorder.own_s
            self.recorder = None
        if not from_memory and len(self.clock.stamps) > self.cfg.warmup_steps + 1:
            self.summary["cost_s"] = self.cost_s()
            self.summary["cost_budget_s"] = self.budget_s()
        for h in self._grad_hooks:
            h.remove()
        self._grad_hooks = []
        self._switch(decision)
        if decision == "stock":
            self.plan_ddp = None  # its buckets go with it
        written = False
        if self.rank == 0 and not from_memory and remember:
            try:
                written = self._write()
            except OSError as e:  # the memory is optional: training goes on with the decision
                warnings.warn(f"commsched tune: could not write the decision to {self.entry} ({e}); it is kept for this job only", stacklevel=4)
        if self.rank == 0 and self.cfg.log:
            # the folder only where the decision is there: written now, or read from it
            where = f" ({self.entry})" if self.entry is not None and (written or from_memory) else ""
            kept = f"{plan_label(self.plan)}'s {_buckets(self.plan)}" if decision == "plan" and self.plan is not None else "stock DDP's default buckets"
            src = "from memory" if from_memory else f"after {self.step} steps"
            print(f"commsched tune: keeping {kept} {src}: {reason}{where}", file=sys.stderr, flush=True)

    def report(self) -> dict:
        """What tuning did, its steps and cost (on rank 0 the measurements too)."""
        stock = self.variant_of.count("stock")
        counts = {"stock": stock, "plan": len(self.variant_of) - stock}  # plan: every step off stock DDP's defaults
        doc = {
            "schema": SCHEMA,
            "decision": self.decision,
            "phase": self.phase,  # warmup, calibrate, trial, done
            # nothing is kept while tuning runs: a report read mid-tuning must not say stock DDP was
            "kept": None if self.decision is None else plan_label(self.plan) if self.decision == "plan" and self.plan is not None else "stock",
            "reason": self.reason,
            "key": self.key,
            "steps_to_decide": self.decided_at,
            "steps_by_variant": counts,
            "calibration_steps": self.cfg.calibration_steps if self.stock_plan is not None else 0,  # 0 until calibrated
            "trial_pairs": self.pairs_before + self.pairs,
            "block_steps": self.cfg.rule.block,
            "tuner_own_s": self.own_s,
            "recorder_own_s": getattr(self, "recorder_own_s", 0.0),
            **self.summary,
        }
        if self.rank == 0 and self.decision is not None and self.pairs:
            doc["trial"] = {**self._trial_steps(), "against": self.trial_against}  # its stock_steps_s: what it raced
            if self.trials:  # every plan tried, in order; "trial" is the last one's
                doc["trials"] = [*self.trials, self._trial_record(self.last_speedup, self.last_why, doc["trial"])]
        return doc

    def _trial_steps(self) -> dict:
        """The current trial's step times by variant (rank 0's clock)."""
        stock, plan = self._blocks()
        return {"stock_steps_s": [t for b in stock for t in b], "plan_steps_s": [t for b in plan for t in b]}

    def _trial_record(self, speedup: dict | None, why: str, steps: dict) -> dict:
        """The current trial as ``trials`` lists it: the plan tried, what it raced (``against``:
        "stock" or the first plan's label; ``stock_steps_s`` are that baseline's steps), its verdict
        and its steps."""
        return {
            "plan": plan_label(self.trial_plan), "bucket_bytes": [b.bytes for b in self.trial_plan.buckets], "against": self.trial_against,
            "measured_speedup": speedup, "why": why, "pairs": self.pairs, **steps,
        }

    # --- the memory ------------------------------------------------------------------------------

    def _backend(self) -> str:
        from commsched.runtime.resource_hook import device_backend

        return device_backend(dist.get_backend_config(self.group), "cuda" if self.cuda else "cpu") or "unknown"

    # the settings every rank's steps follow (each rank counts its own phases; rank 0 decides the rest;
    # without a cluster name every rank gathers the host names)
    SHARED_SETTINGS = ("strategy", "warmup_steps", "calibration_steps", "min_gain", "max_cost", "rule", "keep", "total_steps",
                       "min_job_steps", "fallback_caps_mb", "race_caps", "cluster")

    def _agree_on_config(self) -> None:
        """An error on every rank where the ranks' ``TuneConfig`` differ in a setting their steps
        follow: a rank told the job is too short to tune ran stock DDP's all-reduces while another
        ran tuning's probes, and gloo aborted on the mismatched sizes (a probe's)."""
        digests = [hashlib.sha1(repr(getattr(self.cfg, k)).encode()).hexdigest()[:6] for k in self.SHARED_SETTINGS]
        everyone = [t.split(",") for t in gather_text(",".join(digests), self.group, self.device, self.rank, self.cfg.timeout_s, "tuning's start")]
        differ = [k for i, k in enumerate(self.SHARED_SETTINGS) if len({d[i] for d in everyone}) > 1]
        if differ:
            ranks = sorted({r for r, d in enumerate(everyone) for i, k in enumerate(self.SHARED_SETTINGS) if k in differ and d[i] != everyone[0][i]})
            mine = ", ".join(f"{k}={getattr(self.cfg, k)!r}" for k in differ)
            raise CommschedError(
                f"commsched tune: the ranks' TuneConfig differ in {', '.join(differ)} (rank{'s' if len(ranks) > 1 else ''} "
                f"{few([str(r) for r in ranks])} against rank 0; "
                f"this rank {self.rank} has {mine}): every rank must tune with the same settings"
            )

    def _load_memory(self) -> None:
        cfg = self.cfg
        cluster = cfg.cluster
        if cluster is None:
            hosts = gather_text(socket.gethostname(), self.group, self.device, self.rank, cfg.timeout_s, "tuning's start")
            cluster = ",".join(f"{h}x{hosts.count(h)}" for h in sorted(set(hosts)))
        flags = {"find_unused_parameters": self.find_unused, **{k: repr(v) for k, v in sorted(self.ddp_kwargs.items())}}
        if cfg.keep != "measured":  # a fixed outcome is not a measured one: a measured job must never read it
            flags["keep"] = cfg.keep
        self.key = signature(self.module, self.world, self.backend, cluster, flags, cfg.strategy)
        memory = cfg.memory_dir()
        if memory is not None:
            self.entry = Path(cfg.out_dir) if cfg.out_dir else memory / self.key
        elif cfg.out_dir:
            self.entry = Path(cfg.out_dir)
        from commsched.formats.io import plan_from_json

        payload = None
        if self.rank == 0:
            doc = None
            if memory is not None and not cfg.retune:
                f = memory / self.key / "decision.json"
                if f.is_file():
                    try:
                        doc = json.loads(f.read_text())
                        if (not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("decision") not in _DECISIONS
                                or doc.get("key") != self.key or not isinstance(doc.get("plan"), dict) or not isinstance(doc.get("reason"), str)):
                            raise ValueError("not a decision of this job")
                        # written before keep was in the key: a forced outcome says so in its reason
                        keep = doc.get("keep", "forced" if "as asked (keep=" in doc["reason"] else "measured")
                        if keep != cfg.keep:
                            raise ValueError(f"decided with keep={keep!r}, not {cfg.keep!r}")
                        check_plan_fits(plan_from_json(doc["plan"], where=str(f)), trainable_parameters(self.module))
                    except (OSError, ValueError, CommschedError) as e:  # the memory is a cache: tune again
                        warnings.warn(f"commsched tune: ignoring the remembered decision {f} ({e}); tuning again", stacklevel=4)
                        doc = None
            payload = json.dumps(doc).encode()
        doc = json.loads(broadcast_bytes(payload, self.group, self.device, self.rank, cfg.timeout_s, "tuning's memory"))
        if doc is None:
            return
        self.plan = plan_from_json(doc["plan"], where="the remembered plan")
        if doc["decision"] == "plan":
            self.plan_ddp = None if self.fresh_per_switch else self._new_ddp(self.plan)
        self.summary["from_memory"] = str(memory / self.key) if memory is not None else None
        self._finish(doc["decision"], doc["reason"], from_memory=True)

    def _write(self) -> bool:
        """Rank 0: decision.json, plan.json and ddp_options.json of what is kept, and report.html;
        whether they were written."""
        if self.entry is None:
            return False
        from commsched.formats.io import plan_to_json, write_json
        from commsched.planners.stock_ddp import ddp_options_doc

        kept = self.plan if self.decision == "plan" else self.stock_plan
        if kept is None:  # decided without measuring (a short job, a comm hook, a failed plan): nothing to remember
            return False
        doc = {**self.report(), "keep": self.cfg.keep, "created": date.today().isoformat(), "plan": plan_to_json(kept)}
        write_json(self.entry / "plan.json", doc["plan"])
        write_json(self.entry / "ddp_options.json", ddp_options_doc(kept))
        write_json(self.entry / "decision.json", doc)
        if self.comparison is not None:
            self._write_report(doc)
        return True

    def _write_report(self, doc: dict) -> None:
        from commsched.report.html import plan_section, validate_section, write_report

        sections = [plan_section(self.comparison)]
        trial = doc.get("trial")
        if trial and trial["stock_steps_s"] and trial["plan_steps_s"]:
            trial_doc = _trial_as_validate(doc, [*self.tried_plans, self.trial_plan], self.stock_plan, self.cfg.rule, self.world, self.backend)
            sections.append(validate_section(trial_doc, source="decision.json"))
        write_report(self.entry / "report.html", sections)


def _trial_as_validate(doc: dict, plans: list, stock_plan, rule: TrialRule, world: int, backend: str) -> dict:
    """The trials in the shape of a ``validate.json`` (what the HTML report's measured section reads):
    a row per plan tried (``plans``, in order; ``doc["trials"]`` has their steps when there were
    several), stock DDP's row from the steps of every trial against stock DDP. A plan that raced
    the first plan instead (``against``) has its speedup over stock DDP chained through the first's:
    the product of the two medians, and of the two intervals' ends (not a paired measurement)."""

    def row(p, steps: list[float], speedup: dict) -> dict:
        measured = statistics.median(steps)
        err = p.predicted.iteration_s / measured - 1
        return {
            "buckets": len(p.buckets), "iteration_s": p.predicted.iteration_s, "measured_s": measured,
            "measured_min_s": min(steps), "measured_max_s": max(steps), "error": err, "error_ci95": [err, err],
            "speedup_vs_stock_ddp": speedup["median"], "speedup_ci95": speedup["ci95"],
            "no_contention_s": None, "error_before_run": None, "predicted_before_run_s": None,
        }

    unknown = {"median": 1.0, "ci95": [1.0, 1.0]}
    trials = doc.get("trials") or [{**doc["trial"], "measured_speedup": doc.get("measured_speedup")}]
    strategies, stock_steps, plan_steps, vs_stock = {}, [], {}, {}
    for plan, trial in zip(plans, trials):
        label, against = plan_label(plan), trial.get("against", "stock")
        speedup = trial.get("measured_speedup") or unknown
        if against == "stock":
            stock_steps += trial["stock_steps_s"]
        else:  # its baseline's steps are the first plan's
            plan_steps.setdefault(against, []).extend(trial["stock_steps_s"])
            via = vs_stock.get(against, unknown)
            speedup = {"median": speedup["median"] * via["median"], "ci95": [a * b for a, b in zip(speedup["ci95"], via["ci95"])]}
        vs_stock[label] = speedup
        plan_steps.setdefault(label, []).extend(trial["plan_steps_s"])
    for plan in plans:
        label = plan_label(plan)
        if plan_steps.get(label):
            strategies[label] = row(plan, plan_steps[label], vs_stock[label])
    return {
        "model": plans[-1].model, "batch_size": 1, "world_size": world, "backend": backend,
        "rounds": max(1, len(doc["trial"]["plan_steps_s"]) // rule.block), "steps_per_round": rule.block,
        "best_measured": doc["kept"] if doc["decision"] == "plan" else "stock_ddp",
        "strategies": strategies,
        "stock_ddp": row(stock_plan, stock_steps, unknown),
    }
