"""The resource-sharing paper's Figure 4 against the preset ``rs-2xv100s-pcie`` (issue 12, item 3).

Figure 4: ResNet-18, batch 32 per GPU, PyTorch DDP with 25 MB buckets on 2x V100S over PCIe; the
throughput of each of 16 all-reduce configs relative to the default (2x256). The preset's contention
model comes from Figures 2 and 3 only (and its absolute all-reduce speed from Figure 5c); Figure 4
is not used to make it, so this is a check. Prints, per config, the paper's throughput change and
ours (DDP's default buckets, every all-reduce at that config, scored by the resource simulator),
and Spearman's rank correlation between the two.

Usage: .venv/bin/python benchmarks/reproduce_rs_figure4.py [--batch-size 32] [--profile P.json]
"""

from __future__ import annotations

import argparse

from scipy.stats import spearmanr

from commsched.cost.cluster import read_paper_table, preset
from commsched.cost.resource_models import ResourceConfig
from commsched.formats.io import load_profile
from commsched.planners.stock_ddp import DDP
from commsched.sim.events import simulate_resources


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--profile", default=None, help="a profile JSON instead of the estimated ResNet-18 on a V100S")
    args = ap.parse_args()
    cluster = preset("rs-2xv100s-pcie")
    res = cluster.resources
    assert res is not None
    if args.profile:
        prof = load_profile(args.profile)
    else:
        from commsched.profile.zoo_profile import zoo_profile

        prof = zoo_profile("resnet18", args.batch_size, "V100S")
    ends = DDP().ends(prof, cluster.allreduce)
    t = {c: simulate_resources(prof, ends, cluster.allreduce, res, [c] * len(ends)) for c in res.allowed}
    t_default = t[res.default].iteration_s
    rows = []
    for r in read_paper_table("resource-sharing-fig4-resnet18.csv"):
        c = ResourceConfig(int(r["blocks"]), int(r["threads_per_block"]))
        ours = t_default / t[c].iteration_s - 1.0
        rows.append((c, float(r["throughput_improvement"]), ours, t[c]))
    print(
        f"{prof.model} batch {prof.batch_size} ({prof.source}, {prof.device}): forward {prof.forward_s * 1e3:.1f} ms, "
        f"backward {prof.backward_s * 1e3:.1f} ms, {len(ends)} DDP buckets; default 2x256 iteration {t_default * 1e3:.1f} ms"
    )
    print("| config | paper | ours | iteration ms | compute ms | non-overlapped comm ms |")
    print("|---|---|---|---|---|---|")
    for c, paper, ours, tl in rows:
        print(
            f"| {c.short} | {paper:+.1%} | {ours:+.1%} | {tl.iteration_s * 1e3:.1f} | {tl.compute_s * 1e3:.1f} | "
            f"{tl.non_overlapped_comm_s * 1e3:.1f} |"
        )
    rho, p = spearmanr([r[1] for r in rows], [r[2] for r in rows])
    best_paper = max(rows, key=lambda r: r[1])[0].short
    best_ours = max(rows, key=lambda r: r[2])[0].short
    err = sorted(abs(r[2] - r[1]) for r in rows)
    print(
        f"\nSpearman rank correlation {rho:.3f} (p = {p:.2g}); best config: paper {best_paper}, ours {best_ours}; "
        f"|ours - paper| median {err[len(err) // 2]:.1%}, max {err[-1]:.1%}"
    )


if __name__ == "__main__":
    main()
