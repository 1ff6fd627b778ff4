"""The tuner's in-job model against the hand sweep, cap by cap (issue 33, item 5).

Every stored ``tune_emulated.py`` run keeps the tuned job's fit (its profile, cost table and m) and
the sweep's step times. This predicts each ``bucket_cap_mb`` from the fit and prints it beside the
median step (from step 20 on) that cap's own job measured minutes later, and stock DDP's defaults
the same way. Where the model is off by more between two caps than they differ, the optimum it
plans can lose to a cap (resnet18 at 2 Gbit/s: its 4-bucket plan is predicted 1.4% faster than
1 MiB caps, and measured 1.6% slower). Pure; no cluster needed.

Run (from the repo):
    PYTHONPATH=src .venv/bin/python benchmarks/investigations/caps_predicted.py benchmarks/data/tune/2000/*.json benchmarks/data/tune/500/*.json
"""

from __future__ import annotations

import json
import statistics
import sys

from commsched.calibrate.in_job import semantics_for
from commsched.cost.cost_json import cost_model_from_json
from commsched.formats.io import profile_from_json
from commsched.planners.base import plan_and_timeline
from commsched.planners.stock_ddp import ddp_with_cap

FROM_STEP = 20


def main(paths: list[str]) -> None:
    for path in paths:
        doc = json.loads(open(path).read())
        fitted = [t for t in doc["tuning"] if t.get("predicted")]
        if not fitted:
            print(f"{path}: no fit stored (the tuner decided before planning)")
            continue
        pr = fitted[0]["predicted"]
        fit = pr["model"]
        profile = profile_from_json(pr["profile"])
        cost = cost_model_from_json(fit["cost"], doc["world_size"])
        sem = semantics_for("gloo", fit["comm_slowdown"])
        measured = {v: statistics.median([s for run in runs for s in run[FROM_STEP:]]) for v, runs in doc["steps_s"].items()}
        print(f"{path}: m = {fit['comm_slowdown']:.2f}; measured / predicted, then that against stock DDP's")
        base = measured["stock"] / pr["stock_s"]
        print(f"  {'stock':>6} predicted {pr['stock_s'] * 1e3:7.1f} ms, measured {measured['stock'] * 1e3:7.1f} ms: {base:.3f}")
        for v in sorted((v for v in measured if v.startswith("cap")), key=lambda v: float(v[3:])):
            plan, timeline = plan_and_timeline(ddp_with_cap(float(v[3:])), profile, cost, sem)
            r = measured[v] / timeline.iteration_s
            print(f"  {v:>6} ({len(plan.buckets):3d} buckets) predicted {timeline.iteration_s * 1e3:7.1f} ms, measured {measured[v] * 1e3:7.1f} ms: {r:.3f} ({r / base:.3f})")
        if "tuned" in measured:
            after = statistics.median([s for run in doc["steps_s"]["tuned"] for s in run[3 * FROM_STEP:]])
            print(f"  {'plan':>6} ({len(pr['plan_bucket_bytes']):3d} buckets) predicted {pr['plan_s'] * 1e3:7.1f} ms; the tuned job from step {3 * FROM_STEP}: {after * 1e3:7.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
