"""Calibration: the runtime's behaviour fitted to what was measured, and predictions set against it.

Pure (numpy, no torch): everything here works on measured numbers, plain dicts and lists of seconds
as the probes and training steps of ``commsched validate`` produce them
(:mod:`commsched.runtime.validate.probes`) or as a ``validate.json`` keeps them, so that it can be
reused on samples measured elsewhere (inside a user's own training job, say).

- :mod:`~commsched.calibrate.cost_table`: the all-reduce cost table, made non-decreasing and
  brought to the rounds' minutes (``table_cost``, ``drifted``), and the probes' message sizes;
- :mod:`~commsched.calibrate.compute`: compute under all-reduces and all-reduces under compute, the
  concurrency gain (``contention_of``);
- :mod:`~commsched.calibrate.launch`: what launching DDP's buckets from the backward pass costs
  (``launch_costs``), without the passes that stalled on the link (``unstalled``);
- :mod:`~commsched.calibrate.semantics_fit`: the measured :class:`~commsched.sim.semantics.Semantics`
  from probe samples (``fit_semantics``, ``measured_semantics``);
- :mod:`~commsched.calibrate.profile_steps`: the compute profile from training steps (``ProfileSteps``);
- :mod:`~commsched.calibrate.stats`: predictions against measured steps, paired errors, speedups and
  their bootstrap intervals (``predictions``, ``paired_error``, ``paired_speedup``, ``error_intervals``);
- :mod:`~commsched.calibrate.report`: the ``validate.json`` document (``build_report``,
  ``load_validate_report``, ``finish_partial``, ``print_report``).
"""

from commsched.calibrate.bootstrap import interval95
from commsched.calibrate.compute import (
    MAX_COMPUTE_SLOWDOWN,
    compute_slowdown,
    compute_slowdown_two,
    contention_of,
    slowdown_of_rate,
)
from commsched.calibrate.cost_table import (
    GAIN_SIZES,
    LARGE_PROBE_MAX,
    LONG_MESSAGE_MAX_BYTES,
    MIB,
    PROBE_SIZES,
    anchors_of,
    chain_length,
    drifted,
    probe_sizes,
    table_cost,
)
from commsched.calibrate.launch import (
    MID_PASS_BUCKETS,
    STALL_MIN_CLEAN,
    STALL_MIN_GAP,
    STALL_SEPARATION,
    chain_factor,
    launch_costs,
    mid_pass_planner,
    pass_ends,
    unstalled,
)
from commsched.calibrate.profile_steps import ProfileSteps, profile_steps_of
from commsched.calibrate.report import (
    SCHEMA,
    build_report,
    describe_semantics,
    finish_partial,
    load_validate_report,
    paired_cell,
    print_report,
)
from commsched.calibrate.semantics_fit import fit_semantics, measured_semantics, semantics_of
from commsched.calibrate.stats import STOCK, error_intervals, paired_error, paired_speedup, predictions, repredict

__all__ = [
    "GAIN_SIZES",
    "LARGE_PROBE_MAX",
    "LONG_MESSAGE_MAX_BYTES",
    "MAX_COMPUTE_SLOWDOWN",
    "MIB",
    "MID_PASS_BUCKETS",
    "PROBE_SIZES",
    "SCHEMA",
    "STALL_MIN_CLEAN",
    "STALL_MIN_GAP",
    "STALL_SEPARATION",
    "STOCK",
    "ProfileSteps",
    "anchors_of",
    "build_report",
    "chain_factor",
    "chain_length",
    "compute_slowdown",
    "compute_slowdown_two",
    "contention_of",
    "describe_semantics",
    "drifted",
    "error_intervals",
    "finish_partial",
    "fit_semantics",
    "interval95",
    "launch_costs",
    "load_validate_report",
    "measured_semantics",
    "mid_pass_planner",
    "paired_cell",
    "paired_error",
    "paired_speedup",
    "pass_ends",
    "predictions",
    "print_report",
    "probe_sizes",
    "profile_steps_of",
    "repredict",
    "semantics_of",
    "slowdown_of_rate",
    "table_cost",
    "unstalled",
]
