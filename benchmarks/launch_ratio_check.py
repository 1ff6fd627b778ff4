"""The launch ratio against none, on stored `validate` runs (issue 11, item 7): every run's plans
predicted again from its raw numbers with the fitted ``launch_factor_points`` and with ratio 1
(e fitted alone to the pass with a bucket per gradient), error against the measured medians.

    .venv/bin/python benchmarks/launch_ratio_check.py out/bench-o/500 out/bench-o/2000 ...
(each argument a directory of `validate` runs, one folder per model, as validate_emulated.py writes).
"""

import json, statistics, sys
from dataclasses import replace
from pathlib import Path
import commsched.runtime.validate as V
from commsched.io import profile_from_json, plan_from_json
from commsched.cost.cluster import cluster_from_json
from commsched.planners import DDP
from commsched.sim.contention import simulate_run

def e_alone(probes, sem, profile, cost):
    """e with ratio 1: the least e >= 0 with which the simulator ends compute of the pass with a bucket
    per gradient when its median last gradient was ready (as :func:`launch_costs` fits it)."""
    got = [s["launch_pass"] for s in probes if s.get("launch_pass")]
    target = statistics.median(x[0] for x in got)
    ends = tuple(range(1, len(profile.tensors) + 1))
    f = lambda e: simulate_run(profile, ends, cost, replace(sem, launch_compute_s=e)).compute_s - profile.forward_s
    if f(0.0) >= target: return 0.0
    lo, hi = 0.0, 1e-4
    while f(hi) < target and hi < 1.0: lo, hi = hi, hi * 2
    for _ in range(30):
        m = (lo + hi) / 2
        lo, hi = (m, hi) if f(m) < target else (lo, m)
    return hi

allerr = {"fit": [], "ratio 1": []}
if len(sys.argv) < 2:
    sys.exit("usage: launch_ratio_check.py RUNS_DIR [RUNS_DIR ...]")
for d in sys.argv[1:]:
  for path in sorted(Path(d).iterdir()):
    rep = json.loads((path / "validate.json").read_text())
    order = profile_from_json(json.loads((path / "profile.json").read_text()))
    raw = rep["raw"]["profile_steps"]
    st = V.ProfileSteps(order, tuple(raw["forward_end_s"]), tuple(tuple(r) for r in raw["ready_s"]), tuple(raw["optimizer_s"]), tuple(raw.get("finalize_s", ())), tuple(raw.get("backward_unrecorded_s", ())))
    probes = rep["raw"]["probes"]
    contention = V.contention_of(probes, 200, rep["contention"]["threads"])
    cluster = cluster_from_json(rep["cluster"])
    plans = {n: plan_from_json(x, where=n) for n, x in rep["plans"].items()}
    profile = st.profile()
    ends = {n: V.ends_of_plan(profile, p) for n, p in plans.items()}
    ends["stock"] = DDP().ends(profile, cluster.allreduce)
    meas = {n: statistics.median(r["steps_s"]) for n, r in rep["strategies"].items()}
    meas["stock"] = statistics.median(rep["stock_ddp"]["steps_s"])
    cost = V.drifted(cluster.allreduce, V.anchors_of(probes))
    sem0 = V.semantics_of(contention, rep["backend"])
    e, pts = V.launch_costs(probes, sem0, profile, cost, st.finalize())
    e1 = e_alone(probes, sem0, profile, cost)
    out = {}
    for vn, sem in (("fit", replace(sem0, launch_compute_s=e, launch_factor_points=pts)), ("ratio 1", replace(sem0, launch_compute_s=e1))):
        out[vn] = {n: simulate_run(profile, en, cost, sem).iteration_s / meas[n] - 1 for n, en in ends.items()}
        allerr[vn] += [abs(x) for x in out[vn].values()]
    print(f"{d.split('/')[-2]}/{d.split('/')[-1]}/{path.name} pts={[(b, round(r, 2)) for b, r in pts]}")
    for n in out["fit"]:
        print(f"   {n:>15} {len(ends[n]):4d} " + " ".join(f"{out[v][n]:+6.1%}" for v in out))
for v, xs in allerr.items():
    print(f"{v}: median {statistics.median(xs):.1%} worst {max(xs):.1%} n={len(xs)} over5 {sum(x > 0.05 for x in xs)}")
