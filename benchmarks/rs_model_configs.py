"""Which all-reduce config the resource planners choose on the resource-sharing testbed preset
``rs-2xv100s-pcie``, for the paper's seven models at batch 16-128 (Section 4.4.2), and why (issue 31).

The paper's Table 2 (best config per model and batch) is withheld, so nothing here is fitted to it.
Printed, with the estimated profiles before and after the layer model's per-model FLOP rate
(:func:`commsched.profile.estimate.flop_rate_ratio`; "before" is every model at ResNet-50's efficiency):

1. per model and batch: compute, gradient bytes, all-reduce time at the default 2x256, rs-grid's
   config and its predicted gain over the default, joint's configs;
2. each candidate cause of "too few resources for communication-heavy models at large batch",
   applied alone to the old model: A the layer model's FLOP rate (the fix), B a compute slowdown from
   the model's own kernels in Figure 3, C a size-dependent relative all-reduce time (latency +
   bandwidth per config), D Figure 3's slowdowns halved (a diagnosis, not a model): how many of the
   28 choices each moves, the VGG choices at batch 64, and how far it reorders the 16 configs;
3. the paper's statements the result must keep: fewer resources at larger batch (Section 4.3.2),
   more for the communication-heavy models (Section 4.4.1), ResNet-101's 17.2% as the largest gain
   (abstract), Figure 6's default-vs-optimal gap for ResNet-18 (3.97 ms at batch 16, 6.92 ms at 256);
4. Figure 4 (ResNet-18, batch 32) as a check: Spearman, median and max |ours - paper|;
5. VGG-16 and VGG-19 at batch 64: rs-grid's config as the FLOP rate ratio varies.

Usage: .venv/bin/python benchmarks/rs_model_configs.py [--quick]   (--quick: no joint, 2 batches)
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.stats import spearmanr

from commsched.cost.cluster import RS_MESSAGE_BYTES, RS_STARTUP_S, preset, read_paper_table
from commsched.cost.resource_models import ClusterResources, GridContention, GridEntry, ResourceConfig
from commsched.profile.devices import device
from commsched.planners import Joint, RSGrid
from commsched.planners.stock_ddp import DDP
from commsched.planners.resources import run_events
from commsched.profile.estimate import estimate_profile, flop_rate_ratio
from commsched.profile.zoo_profile import zoo_inventory

MODELS = ("alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "resnet101", "vit_b_16")  # Section 4.4.2
HEAVY = ("alexnet", "vgg16", "vgg19")  # low model intensity, Section 4.4.1
BATCHES = (16, 32, 64, 128)
DEVICE = "V100S"
CLUSTER = preset("rs-2xv100s-pcie")
RES = CLUSTER.resources
COST = CLUSTER.allreduce
DEFAULT = ResourceConfig(2, 256)
# Figure 3's kernels standing for each model's backward (B): the preset's conv2d, batch_norm, relu for
# the ResNets; conv2d, relu, linear and avg_pool (for max_pool) for AlexNet and VGG, which have no
# BatchNorm; linear, batch_norm (for LayerNorm) and relu (for GELU) for ViT. Geometric mean, as the preset.
KERNELS = {m: ("conv2d", "relu", "linear", "avg_pool") for m in HEAVY} | {"vit_b_16": ("linear", "batch_norm", "relu")}


def _cfg(row) -> ResourceConfig:
    return ResourceConfig(int(row["blocks"]), int(row["threads_per_block"]))


FIG2 = {_cfg(r): float(r["relative_time"]) for r in read_paper_table("resource-sharing-fig2-allreduce.csv")}
FIG3: dict[str, dict[ResourceConfig, float]] = {}
for _r in read_paper_table("resource-sharing-fig3-compute-slowdown.csv"):
    FIG3.setdefault(_r["kernel"], {})[_cfg(_r)] = float(_r["slowdown"])
FIG4 = {_cfg(r): float(r["throughput_improvement"]) for r in read_paper_table("resource-sharing-fig4-resnet18.csv")}


def grid(kernels=("conv2d", "batch_norm", "relu"), relative=None, slowdown_scale: float = 1.0) -> ClusterResources:
    """The preset's grid rebuilt from Figures 2-3 with other kernels, size points or a scale on (f - 1)."""
    entries = []
    for c in FIG2:
        f = math.exp(np.mean([math.log(FIG3[k][c]) for k in kernels]))
        pts = relative(c) if relative else ((RS_MESSAGE_BYTES, FIG2[c]),)
        entries.append((c, GridEntry(pts, 1.0 + slowdown_scale * (f - 1.0))))
    g = GridContention(tuple(entries))
    return ClusterResources(g.configs, DEFAULT, g)


def latency_bandwidth(c: ResourceConfig):
    """C: t_R(n) = a + b_R n with NCCL's latency a (the preset's 19.8 us, the same for every config)
    and b_R from Figure 2 at 25 MB; relative to the default's a + b n at 1 KiB..1 GiB."""
    n25, t25 = RS_MESSAGE_BYTES, COST.time_s(RS_MESSAGE_BYTES)
    b = (FIG2[c] * t25 - RS_STARTUP_S) / n25
    return tuple((n, (RS_STARTUP_S + b * n) / COST.time_s(n)) for n in (2**k for k in range(10, 31)))


def per_config(prof, res) -> dict[ResourceConfig, float]:
    ends = DDP().ends(prof, COST)
    return {c: max(run_events(prof, ends, COST, res, [c] * len(ends))[1]) for c in res.allowed}


def profile(inv, batch: int, flop_rate: float | None):
    return estimate_profile(inv, DEVICE, batch, flop_rate=flop_rate)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="batches 16 and 64 only, no joint")
    args = ap.parse_args()
    batches = (16, 64) if args.quick else BATCHES
    t0 = time.perf_counter()
    invs = {m: zoo_inventory(m) for m in MODELS}
    dev = device(DEVICE)

    print(f"## rs-2xv100s-pcie, {DEVICE}: rs-grid's config per model and batch, before -> after the layer model's FLOP rate\n")
    print("FLOP rate ratio r (x ResNet-50's efficiency c) at batch 64: " + ", ".join(f"{m} {flop_rate_ratio(invs[m], dev, 64):.2f}" for m in MODELS) + "\n")
    print("| model | batch | compute ms (before -> after) | grad MB | all-reduce at 2x256 ms | rs-grid before | rs-grid after | gain over 2x256 before -> after | joint after |")
    print("|---|---|---|---|---|---|---|---|---|")
    choice = {"before": {}, "after": {}}
    times = {"before": {}, "after": {}}
    for m in MODELS:
        for b in batches:
            cells = {}
            for when, r in (("before", 1.0), ("after", None)):
                p = profile(invs[m], b, r)
                t = per_config(p, RES)
                best = RSGrid().assign(p, COST, RES)[1][0]
                choice[when][m, b] = best
                times[when][m, b] = t
                cells[when] = (p.compute_s, best, t[DEFAULT] / t[best] - 1)
            p = profile(invs[m], b, None)
            joint = "-" if args.quick else ",".join(sorted({c.short for c in Joint().assign(p, COST, RES)[1]}))
            comm = COST.time_s(p.total_bytes) * FIG2[DEFAULT]
            print(
                f"| {m} | {b} | {cells['before'][0] * 1e3:.0f} -> {cells['after'][0] * 1e3:.0f} | {p.total_bytes / 1e6:.0f} | {comm * 1e3:.0f} | "
                f"{cells['before'][1].short} | {cells['after'][1].short} | {cells['before'][2]:+.1%} -> {cells['after'][2]:+.1%} | {joint} |"
            )

    print("\n## Each candidate cause alone, on the old model (every model at ResNet-50's efficiency)\n")
    print("| candidate | rs-grid choices moved (of %d) | vgg16 / vgg19 at batch 64 | configs' ranking vs before: median (min) Spearman |" % (len(MODELS) * len(batches)))
    print("|---|---|---|---|")
    size_grid = grid(relative=latency_bandwidth)
    half = grid(slowdown_scale=0.5)
    candidates = {
        "A layer-model FLOP rate (the fix)": (lambda m: None, lambda m: RES),
        "B slowdown of the model's own kernels (Fig. 3)": (lambda m: 1.0, lambda m: grid(KERNELS[m]) if m in KERNELS else RES),
        "C latency + bandwidth per config (NCCL's a, Fig. 2's b)": (lambda m: 1.0, lambda m: size_grid),
        "D Fig. 3's slowdowns halved (diagnosis only)": (lambda m: 1.0, lambda m: half),
        "A + B": (lambda m: None, lambda m: grid(KERNELS[m]) if m in KERNELS else RES),
    }
    for name, (rate, res_of) in candidates.items():
        moved, rhos, vgg = 0, [], {}
        for m in MODELS:
            for b in batches:
                t = per_config(profile(invs[m], b, rate(m)), res_of(m))
                best = min(t, key=lambda c: (t[c], c.threads, c.blocks))
                moved += best != choice["before"][m, b]
                before = times["before"][m, b]
                rhos.append(spearmanr([before[c] for c in FIG2], [t[c] for c in FIG2])[0])
                if m in ("vgg16", "vgg19") and b == 64:
                    vgg[m] = best.short
        print(f"| {name} | {moved} | {vgg.get('vgg16', '-')} / {vgg.get('vgg19', '-')} | {np.median(rhos):.3f} ({min(rhos):.3f}) |")

    print("\n## The paper's statements, after\n")
    after = choice["after"]
    fewer = all(after[m, b2].threads <= after[m, b1].threads for m in MODELS for b1, b2 in zip(batches, batches[1:]))
    bad = [(m, b1, b2) for m in MODELS for b1, b2 in zip(batches, batches[1:]) if after[m, b2].threads > after[m, b1].threads]
    print(f"- fewer (or as many) GPU threads at every larger batch (Section 4.3.2): {fewer}" + (f", not for {bad}" if bad else ""))
    for b in batches:
        heavy = min(after[m, b].threads for m in HEAVY)
        rest = max(after[m, b].threads for m in MODELS if m not in HEAVY)
        print(f"- batch {b}: least threads among AlexNet/VGG {heavy}, most among the others {rest}: heavy >= others {heavy >= rest}")
    for when in ("before", "after"):
        gains = {(m, b): times[when][m, b][DEFAULT] / min(times[when][m, b].values()) - 1 for m in MODELS for b in batches}
        top = max(gains, key=gains.get)
        over = sum(g > 0.172 for g in gains.values())
        print(f"- {when}: largest predicted gain of the best config over 2x256 {gains[top]:+.1%} ({top[0]}, batch {top[1]}); {over} of {len(gains)} over the abstract's 17.2% (ResNet-101 the largest)")
    inv18 = zoo_inventory("resnet18")
    gaps = []
    for b in (16, 256):
        t = per_config(profile(inv18, b, None), RES)
        gaps.append(f"batch {b} {(t[DEFAULT] - min(t.values())) * 1e3:.2f} ms")
    print(f"- ResNet-18 default minus best iteration (Figure 6: 3.97 ms at batch 16, 6.92 ms at 256): {', '.join(gaps)}")

    print("\n## Figure 4 (ResNet-18, batch 32) as a check\n")
    for when, r in (("before", 1.0), ("after", None)):
        t = per_config(profile(inv18, 32, r), RES)
        ours = {c: t[DEFAULT] / t[c] - 1 for c in FIG4}
        rho = spearmanr([FIG4[c] for c in FIG4], [ours[c] for c in FIG4])[0]
        err = sorted(abs(ours[c] - FIG4[c]) for c in FIG4)
        print(
            f"- {when}: Spearman {rho:.3f}, |ours - paper| median {err[len(err) // 2]:.1%}, max {err[-1]:.1%}; "
            f"best {max(ours, key=ours.get).short} (paper 1x256); default iteration {t[DEFAULT] * 1e3:.1f} ms (paper ~49)"
        )

    print("\n## VGG at batch 64: rs-grid's config as the FLOP rate ratio r varies\n")
    ratios = (1.0, 1.25, 1.5, 1.75, 2.0, 2.31, 2.54, 3.0)
    print("| model | " + " | ".join(f"r = {r:g}" for r in ratios) + " |")
    print("|---|" + "---|" * len(ratios))
    for m in ("vgg16", "vgg19"):
        row = []
        for r in ratios:
            t = per_config(profile(invs[m], 64, r), RES)
            row.append(min(t, key=lambda c: (t[c], c.threads, c.blocks)).short)
        print(f"| {m} | " + " | ".join(row) + " |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
