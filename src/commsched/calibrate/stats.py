"""Predicted against measured: every variant's prediction, its errors and speedup, with intervals.

From what a ``validate`` run measured in its rounds (profile steps, probes, the cost table, the
plans, every variant's timed steps), :func:`predictions` predicts each variant's step and sets it
against the measured steps: the pooled error with its bootstrap interval (:func:`error_intervals`),
the error paired in time (:func:`paired_error`) and the speedup over stock DDP paired by round
(:func:`paired_speedup`). :func:`repredict` makes a stored ``validate.json``'s predictions again.
Pure: no torch.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

from commsched.calibrate.bootstrap import interval95
from commsched.calibrate.compute import contention_of
from commsched.calibrate.cost_table import anchors_of, drifted
from commsched.calibrate.profile_steps import ProfileSteps, profile_steps_of
from commsched.calibrate.semantics_fit import measured_semantics
from commsched.cost.cluster import ClusterSpec, cluster_from_json
from commsched.cost.models import Table
from commsched.errors import CommschedError
from commsched.formats.io import plan_from_json
from commsched.planners import DDP
from commsched.sim.events import simulate_run
from commsched.sim.semantics import Semantics
from commsched.sim.timeline import ends_of_plan
from commsched.types import ModelProfile, Plan

# the name of stock DDP with its defaults among the variants (its row is the report's ``stock_ddp``)
STOCK = "torch-ddp"


def predictions(
    steps_table: ProfileSteps,
    probes: list[dict],
    contention: dict,
    cluster: ClusterSpec,
    plans: dict[str, Plan],
    measured: dict[str, list[float]],
    steps: int,
    resamples: int,
    backend: str,
    threads: int,
    light_before: dict[str, list[int]] | None = None,
) -> tuple[dict[str, dict], Semantics, Table]:
    """Every variant's prediction from the numbers measured in the rounds, against its measured
    steps: one row per plan and one for stock DDP's own buckets (under ``STOCK``), the semantics and
    the drifted cost table that predicted. ``contention`` is :func:`contention_of` over ``probes``;
    each plan carries its own prediction, made from the numbers before the rounds. ``light_before``:
    per variant, the light step run just before its steps in each round (:func:`paired_error`;
    without it, as in reports from before, the light step of each round's start)."""
    profile = steps_table.profile()
    ends_of = {name: ends_of_plan(profile, plan) for name, plan in plans.items()}
    ends_of[STOCK] = DDP().ends(profile, cluster.allreduce)  # stock DDP's own buckets
    # predictions use the table brought to the rounds' minutes (the plans were made from the table as measured)
    cost_in_rounds = drifted(cluster.allreduce, anchors_of(probes))
    semantics = measured_semantics(probes, contention, backend, profile, cost_in_rounds, steps_table.finalize())
    intervals = error_intervals(steps_table, probes, ends_of, cluster, measured, resamples, backend, threads)
    rounds = len(measured[STOCK]) // steps
    paired = {
        name: paired_error(
            steps_table, profile, ends, cost_in_rounds, semantics, measured[name], steps,
            light_before[name] if light_before else list(range(rounds)), resamples,
        )
        for name, ends in ends_of.items()
    }
    rows = {}
    for name, ends in ends_of.items():
        tl = simulate_run(profile, ends, cost_in_rounds, semantics)
        plain = simulate_run(profile, ends, cost_in_rounds, Semantics(semantics.backend, semantics.threads, semantics.concurrency_gain)).iteration_s  # no contention
        med = statistics.median(measured[name])
        ahead = plans[name].predicted.iteration_s if name in plans else None
        rows[name] = {
            "buckets": len(ends),
            "iteration_s": tl.iteration_s,
            "measured_s": med,
            "measured_min_s": min(measured[name]),
            "measured_max_s": max(measured[name]),
            "error": tl.iteration_s / med - 1,
            "error_ci95": list(intervals[name]),
            "predicted_before_run_s": ahead,
            "error_before_run": None if ahead is None else ahead / med - 1,
            **paired[name],
            "no_contention_s": plain,
            "error_no_contention": plain / med - 1,
            **paired_speedup(measured[STOCK], measured[name], steps, resamples),
            "steps_s": measured[name],  # every timed step (slowest rank), in run order
            "timeline": {
                "predicted": {
                    "backward_end_s": tl.compute_s,
                    "allreduce_end_s": tl.iteration_s - profile.optimizer_s,
                    "allreduce_busy_s": tl.comm_s,
                },
            },
        }
    return rows, semantics, cost_in_rounds



def repredict(report: dict, order: ModelProfile, resamples: int = 200) -> dict:
    """``report`` (a ``validate.json``) with its predictions made again by this code from the raw
    numbers it kept (profile steps, probes, the cost table, the plans, the measured steps); the
    measurements are unchanged. ``order`` gives the tensors' names and bytes in ready order
    (``profile.json`` of the same run). ``resamples`` also decides, as in the run, whether the
    concurrency gain and c2 are used (their bootstrap intervals): with a handful of resamples
    those decisions, and so the predictions, can differ from the run's."""
    steps_table = profile_steps_of(report, order)
    probes = report["raw"]["probes"]
    threads = report["contention"]["threads"]
    contention = contention_of(probes, resamples, threads)
    cluster = cluster_from_json(report["cluster"])
    plans = {name: plan_from_json(doc, where=name) for name, doc in report["plans"].items()}
    measured = {name: row["steps_s"] for name, row in report["strategies"].items()}
    measured[STOCK] = report["stock_ddp"]["steps_s"]
    rows, semantics, cost_in_rounds = predictions(
        steps_table, probes, contention, cluster, plans, measured, report["steps_per_round"], resamples, report["backend"], threads,
        report["raw"]["profile_steps"].get("light_before"),
    )
    old = {**report["strategies"], STOCK: report["stock_ddp"]}
    for name, row in rows.items():
        row["timeline"]["measured"] = old[name]["timeline"]["measured"]
    stock = rows.pop(STOCK)
    out = {**report, "strategies": rows, "stock_ddp": stock, "contention": {**report["contention"], **contention}, "semantics": semantics.to_json()}
    out["cluster_in_rounds"] = replace(cluster, allreduce=cost_in_rounds).to_json()
    return out


def paired_error(
    steps_table: ProfileSteps, profile: ModelProfile, ends: tuple[int, ...], cost: Table, semantics: Semantics,
    measured: list[float], steps: int, light: list[int], resamples: int, seed: int = 0,
) -> dict:
    """The prediction error paired in time, as :func:`paired_speedup` pairs speedups: per round, the
    run's profile with every compute time scaled by the machine's speed at that moment (the light
    step ``light[r]``, run just before the variant's steps, against the median light step),
    predicted and set over the variant's mean step in that round, minus 1 (``profile``: the run's,
    ``steps_table.profile()``, made once by the caller for every variant); the median over rounds,
    with a 95% bootstrap interval over rounds. The per-tensor shares, the cost table and the
    semantics are the whole run's: one round's are too few.

    Why: the machine's compute speed moves in phases of seconds to minutes (resnet18 at 2 Gbit/s,
    2026-11-24: steps at 0.6 of their speed for 7 rounds of 12; bert_small, 2026-11-25: steps of
    one variant 460-880 ms, slow and fast rounds), and the step time is not linear in the compute
    times (all-reduces overlap compute and do not slow alike), so the prediction from the median
    profile of a run with two phases is not the median of its steps: that error is the machine's,
    not the model's. The pooled ``error`` is kept beside this one.
    """
    rounds = min(len(measured) // steps, len(light))
    if rounds == 0:
        raise CommschedError(f"no whole round to pair: {len(measured)} measured steps, {steps} per round")
    if not steps_table.backward_unrecorded_s or max(light[:rounds]) >= len(steps_table.backward_unrecorded_s):
        raise CommschedError(f"light steps {light[:rounds]} not among the {len(steps_table.backward_unrecorded_s)} measured")
    typical = statistics.median(steps_table.backward_unrecorded_s)
    errors = []
    for r in range(rounds):
        speed = steps_table.backward_unrecorded_s[light[r]] / typical  # > 1: slower than usual
        at_speed = replace(
            profile, forward_s=profile.forward_s * speed, optimizer_s=profile.optimizer_s * speed,
            tensors=tuple(replace(t, backward_s=t.backward_s * speed) for t in profile.tensors),
        )
        errors.append(simulate_run(at_speed, ends, cost, semantics).iteration_s / statistics.fmean(measured[r * steps : (r + 1) * steps]) - 1)
    rng = random.Random(seed)
    lo, hi = interval95([statistics.median(errors[rng.randrange(rounds)] for _ in range(rounds)) for _ in range(max(1, resamples))])
    return {"error_paired": statistics.median(errors), "error_paired_ci95": [lo, hi], "error_per_round": errors}


def paired_speedup(stock: list[float], variant: list[float], steps: int, resamples: int, seed: int = 0) -> dict:
    """Speedup over stock DDP, paired by round: per round, stock's mean step over the variant's
    (both ran in that round, minutes apart at most), then the median over rounds, with a 95%
    bootstrap interval over rounds. Pairing takes out the machine's drift between rounds, which on
    this project's machines is larger than the differences being measured."""
    rounds = min(len(stock), len(variant)) // steps
    ratios = [
        statistics.fmean(stock[r * steps : (r + 1) * steps]) / statistics.fmean(variant[r * steps : (r + 1) * steps])
        for r in range(rounds)
    ]
    rng = random.Random(seed)
    lo, hi = interval95([statistics.median(ratios[rng.randrange(rounds)] for _ in range(rounds)) for _ in range(resamples)])
    return {
        "speedup_vs_stock_ddp": statistics.median(ratios),
        "speedup_ci95": [lo, hi],
        "speedup_of_medians": statistics.median(stock) / statistics.median(variant),
    }


def error_intervals(
    steps: ProfileSteps,
    probes: list[dict],
    ends_of: dict[str, tuple[int, ...]],
    cluster: ClusterSpec,
    measured: dict[str, list[float]],
    resamples: int,
    backend: str = "gloo",
    threads: int = 1,
    seed: int = 0,
) -> dict[str, tuple[float, float]]:
    """95% bootstrap intervals of each strategy's prediction error (predicted / measured - 1).

    Each resample draws, with replacement, the profile steps (the profile is made again from them),
    the probes (the semantics are fitted again, the cost table drifted again) and each strategy's
    measured steps, and predicts
    again: so the interval holds the noise of both sides of the comparison. Steps are resampled
    independently, which is not exact either way: the machine's slow phases (seconds long)
    correlate neighbouring steps, which narrows the interval, while resampling each side on its own
    ignores that interleaved variants share those phases, which widens it. The interval takes the
    same number of resamples off each end.
    """
    rng = random.Random(seed)
    k, p, q = len(steps.forward_end_s), len(probes), len(steps.backward_unrecorded_s)
    decided = contention_of(probes, resamples, threads)  # the point estimate's decisions (gain, c2)
    errors: dict[str, list[float]] = {name: [] for name in ends_of}
    for _ in range(resamples):
        steps_picked = [rng.randrange(k) for _ in range(k)]
        profile = steps.profile(steps_picked, [rng.randrange(q) for _ in range(q)] if q else None)
        pick = [probes[rng.randrange(p)] for _ in range(p)]
        cost = drifted(cluster.allreduce, anchors_of(pick))
        sem = measured_semantics(pick, contention_of(pick, 0, threads, decided=decided), backend, profile, cost, steps.finalize(steps_picked))
        for name, ends in ends_of.items():
            ts = measured[name]
            med = statistics.median(ts[rng.randrange(len(ts))] for _ in range(len(ts)))
            errors[name].append(simulate_run(profile, ends, cost, sem).iteration_s / med - 1)
    return {name: interval95(es) for name, es in errors.items()}

