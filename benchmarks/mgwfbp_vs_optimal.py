"""Is MG-WFBP's Algorithm 1 optimal (its Theorem 1)? Compare it with the exact `optimal` planner.

Run: .venv/bin/python benchmarks/mgwfbp_vs_optimal.py
For the models of MG-WFBP Table IV (batch sizes as there) on its three clusters (Fig. 4), estimated
on the clusters' GPUs, at 4..2048 workers with ring and double-binary-tree all-reduce, it prints how
often and by how much MG-WFBP's predicted iteration time exceeds the optimum.
"""

from __future__ import annotations

from commsched.cost.cluster import preset
from commsched.planners import MGWFBP, Optimal, make_plan
from commsched.profile.zoo_profile import zoo_profile
from commsched.scale import expand_workers

MODELS = {"googlenet": 64, "resnet50": 32, "resnet152": 128, "densenet161": 64, "densenet201": 64, "inception_v3": 128}
CLUSTERS = {"k80-10gbe": "K80", "v100-10gbe": "V100", "v100-56gbib": "V100"}


def main() -> None:
    workers = expand_workers("4,8,...,2048")
    rows = []
    for cname, dev in CLUSTERS.items():
        profiles = {m: zoo_profile(m, b, dev) for m, b in MODELS.items()}
        for algo in ("ring", "double_binary_tree"):
            base = preset(cname).with_algorithm(algo)
            for m, prof in profiles.items():
                for n in workers:
                    cost = base.with_workers(n).allreduce
                    mg = make_plan(MGWFBP(), prof, cost).predicted.iteration_s
                    opt = make_plan(Optimal(), prof, cost).predicted.iteration_s
                    rows.append((cname, algo, m, n, mg, opt, mg / opt - 1))
    worse = [r for r in rows if r[6] > 1e-9]
    print(f"cases: {len(rows)}; MG-WFBP slower than optimal in {len(worse)} ({len(worse) / len(rows):.0%})")
    gaps = sorted(r[6] for r in worse)
    if gaps:
        print(f"gap when slower: median {gaps[len(gaps) // 2]:.2%}, max {gaps[-1]:.2%}")
    print("\n| cluster | algorithm | model | workers | mgwfbp ms | optimal ms | mgwfbp slower by |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(worse, key=lambda r: -r[6])[:12]:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4] * 1e3:.2f} | {r[5] * 1e3:.2f} | {r[6]:.2%} |")
    print("\nper model, worst gap over clusters, algorithms and worker counts:")
    for m in MODELS:
        g = max(r[6] for r in rows if r[2] == m)
        print(f"  {m}: {g:.2%}")


if __name__ == "__main__":
    main()
