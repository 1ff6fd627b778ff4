"""The launch ratio against none, on stored `validate` runs (issue 11, item 7): every run's plans
predicted again from its raw numbers with the fitted ``launch_factor_points`` and with ratio 1
(e fitted alone to the pass with a bucket per gradient), error against the measured medians.

It also prints the error of each fused plan's predicted ratio to stock DDP's defaults (the paired
error, (1 + e) / (1 + e_stock) - 1, plans with fewer buckets than tensors), from which `optimal`'s
min gain over stock DDP is set (``MIN_GAIN_OVER_DDP``: its 90th percentile, rounded up).

Run (from the repo, no cluster needed; each argument a directory of runs, one folder per model, as
``benchmarks/validate_emulated.py`` writes them):
    .venv/bin/python benchmarks/investigations/launch_ratio_check.py out/bench-o/500 out/bench-o/2000
"""

import statistics
import sys
from dataclasses import replace
from pathlib import Path

from commsched.calibrate import anchors_of, contention_of, drifted, launch_costs, load_validate_report, profile_steps_of, semantics_of
from commsched.cost.cluster import cluster_from_json
from commsched.formats.io import load_profile, plan_from_json
from commsched.planners import DDP
from commsched.sim.events import simulate_run
from commsched.sim.timeline import ends_of_plan


def e_alone(probes: list[dict], sem, profile, cost) -> float:
    """e with ratio 1: the least e >= 0 with which the simulator ends compute of the pass with a
    bucket per gradient when its median last gradient was ready, by bisection as
    :func:`launch_costs` fits it (to a second at most)."""
    target = statistics.median(p["launch_pass"][0] for p in probes if p.get("launch_pass"))
    ends = tuple(range(1, len(profile.tensors) + 1))

    def compute_end(e: float) -> float:
        return simulate_run(profile, ends, cost, replace(sem, launch_compute_s=e)).compute_s - profile.forward_s

    if compute_end(0.0) >= target:
        return 0.0
    lo, hi = 0.0, 1e-4
    while compute_end(hi) < target:
        if hi >= 1.0:
            return 1.0
        lo, hi = hi, min(1.0, hi * 2.0)
    for _ in range(24):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if compute_end(mid) < target else (lo, mid)
    return hi


def load_run(root: Path):
    """One stored run's numbers for predicting again: (probes, profile, the rounds' cost table,
    {plan: bucket ends} with stock DDP's as "stock", {plan: measured median}, the semantics before
    the launch costs, DDP's finalize time)."""
    report = load_validate_report(root / "validate.json")
    steps = profile_steps_of(report, load_profile(root / "profile.json"))
    profile = steps.profile()
    probes = report["raw"]["probes"]
    cluster = cluster_from_json(report["cluster"])
    cost = drifted(cluster.allreduce, anchors_of(probes))  # the table of the rounds, as repredict
    ends = {name: ends_of_plan(profile, plan_from_json(doc, where=name)) for name, doc in report["plans"].items()}
    ends["stock"] = DDP().ends(profile, cluster.allreduce)
    measured = {name: row["measured_s"] for name, row in report["strategies"].items()}
    measured["stock"] = report["stock_ddp"]["measured_s"]
    sem = semantics_of(contention_of(probes, 200, report["contention"]["threads"]), report["backend"])
    return probes, profile, cost, ends, measured, sem, steps.finalize()


def run_errors(root: Path) -> tuple[tuple, dict[str, dict[str, float]], dict[str, int], int]:
    """(the fitted points, {variant: {plan: pooled error}}, {plan: buckets}, tensors) of one stored run."""
    probes, profile, cost, ends, measured, sem, finalize_s = load_run(root)
    e, points = launch_costs(probes, sem, profile, cost, finalize_s)
    variants = {"fit": replace(sem, launch_compute_s=e, launch_factor_points=points), "ratio 1": replace(sem, launch_compute_s=e_alone(probes, sem, profile, cost))}
    errors = {v: {n: simulate_run(profile, en, cost, s).iteration_s / measured[n] - 1 for n, en in ends.items()} for v, s in variants.items()}
    return points, errors, {n: len(en) for n, en in ends.items()}, len(profile.tensors)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {sys.argv[0]} RUNS_DIR [RUNS_DIR ...]")
    pooled: dict[str, list[float]] = {"fit": [], "ratio 1": []}
    paired: list[float] = []  # fused plans' predicted ratio to stock DDP's defaults: its error
    for runs in map(Path, sys.argv[1:]):
        for root in sorted(runs.iterdir()):
            points, errors, buckets, tensors = run_errors(root)
            print(f"{root} ratios {[(b, round(r, 2)) for b, r in points]}  (columns: fit, ratio 1)")
            for name in errors["fit"]:
                print(f"   {name:>15} {buckets[name]:4d} " + " ".join(f"{errors[v][name]:+6.1%}" for v in errors))
            for v in pooled:
                pooled[v] += [abs(x) for x in errors[v].values()]
            fit = errors["fit"]
            paired += [abs((1 + fit[n]) / (1 + fit["stock"]) - 1) for n in fit if n != "stock" and buckets[n] < tensors]
    for v, xs in pooled.items():
        print(f"{v}: median {statistics.median(xs):.1%}, worst {max(xs):.1%}, {sum(x > 0.05 for x in xs)} of {len(xs)} rows over 5%")
    p90 = statistics.quantiles(paired, n=10)[-1]
    print(f"paired error of {len(paired)} fused plans against stock DDP (fit): median {statistics.median(paired):.1%}, 90th percentile {p90:.1%}, worst {max(paired):.1%}")


if __name__ == "__main__":
    main()
