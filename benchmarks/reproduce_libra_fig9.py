"""LIBRA's Figure 9 (Liu et al., Section V-D) against commsched (issue 14, "the papers side by side").

Figure 9: per-node training throughput normalised by single-node throughput (with a fixed per-node
batch this is the scaling factor T_comp / T_iter) on 16 to 2048 nodes, one V100 per node, for the
four models of Table I (Xception, ResNet152, VGG16, BERT-Base) and five methods: SE (SynEASGD), H-N
(Horovod fusion, NCCL's thread allocation), MG-N (MG-WFBP fusion, NCCL's), LIBRA-M (MG-WFBP fusion,
LIBRA's allocation, Eq. 16-19) and LIBRA (fusion and allocation co-optimised, Eq. 21-23, K = 10,
Z = 150). The figure's points are not in the text; the text states LIBRA's gain over H-N and MG-N
at VGG16 on 2048 nodes (20.0% and 21.0%) and four qualitative findings, which this script checks.
Section V-C's 8-node numbers (Fig. 6, real testbed) are printed beside them at N = 8.

What is ours, and why (the paper's numbers that exist are used; what it lacks is named):

- Cluster (Section V-A): one V100 per node, 50 Gbit/s RDMA, ring all-reduce; Eq. 4's
  a = 2(N-1) alpha and c-hat = 2(N-1)/N c are MG-WFBP Table II's ring row, which commsched's
  ``AlgorithmCost("ring")`` is (checked below). The paper gives no alpha: NCCL's own per-step latency
  for a network ring with the Simple protocol is used (14 us, NCCL src/graph/tuning.cc, as in
  commsched's hierarchical presets); beta = 1 / 50 Gbit/s (nominal).
- Contention: the paper gives the form of its model (Eq. 5-6) but no fitted coefficients, so the
  preset ``rs-2xv100s-pcie``'s measured grid (resource-sharing paper, Figures 2-3; 16 configs
  B x T, r = 64..2048, NCCL default 2x256) stands in for it. LIBRA's thread set R (powers of two,
  128-4096) cannot be used as such: the grid has measurements only for its 16 (B, T) configs
  (r = 4096 is not among them). Like LIBRA's own simulation (Section V-B), only a and c-hat change
  with N; the contention model is the one fitted on the small cluster.
- Models: resnet152, vgg16 and bert_base (sequence 128; the paper gives none) from the zoo; Xception
  is not in the zoo, so this script builds Keras' Xception (the paper ran TensorFlow 2.1; layer list
  of keras.applications.Xception, Chollet 2017 Fig. 5: 22,855,952 trainable parameters) and
  profiles it like a zoo model. Layer times are FLOP estimates on a V100 PCIe (OSF Eq. 4-6).

``--causes`` re-runs the 8- and 2048-node points under variants of the contention model, to find
what moves ours towards or away from the paper (see docs/reproductions.md, "LIBRA").

Usage: .venv/bin/python benchmarks/reproduce_libra_fig9.py [--quick] [--causes] [--models vgg16,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from commsched.cost.cluster import NCCL_NET_STEP_S, GBIT, ClusterSpec, preset
from commsched.cost.resource_models import ClusterResources, GridContention, ResourceConfig
from commsched.cost.models import AlgorithmCost, LinkParams
from commsched.planners import MGWFBP, Horovod, Libra, SyncEASGD, horovod_legacy
from commsched.planners.libra import libra_fixed
from commsched.sim.events import simulate_resources
from commsched.sim.timeline import simulate
from commsched.types import ModelProfile

# LIBRA Table I: model, batch size per GPU (zoo name or "xception", built below)
MODELS = {"xception": 32, "resnet152": 32, "vgg16": 128, "bert_base": 32}
FIG9_NODES = (16, 32, 64, 128, 256, 512, 1024, 2048)  # Section V-D
TESTBED_NODES = 8  # Section V-A
DEVICE = "V100"  # Section V-A: "Nvidia Tesla V100" (PCIe or SXM2 not said; PCIe's 14 TFLOP/s used)
LINK = LinkParams(alpha_s=NCCL_NET_STEP_S, beta_s_per_byte=1 / (50 * GBIT))
METHODS = ("SE", "H-N", "MG-N", "LIBRA-M", "LIBRA")
# Section V-D text (Fig. 9(c)): LIBRA's improvement at VGG16, 2048 nodes
PAPER_FIG9 = {("H-N", "vgg16", 2048): 0.200, ("MG-N", "vgg16", 2048): 0.210}
# Section V-C (Fig. 6, 8 real nodes): LIBRA over SE, H-N, MG-N (range over the four models),
# LIBRA-M over MG-N, and MG-CF's gap over MG-N ("10.7% gap between MG-CF and MG-N due to contention")
PAPER_FIG6 = {"LIBRA/SE": (0.113, 0.269), "LIBRA/H-N": (0.058, 0.138), "LIBRA/MG-N": (0.042, 0.062), "LIBRA-M/MG-N": 0.041, "MG-CF/MG-N": 0.107}
LIBRA_FIG1A_SLOWDOWN = 1.38  # Section I, Fig. 1(a): 0 -> 2048 communication threads, computation +38%


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- Xception (keras.applications.Xception's layer list) -----------------------------------------


def build_xception():
    import torch.nn as nn

    class SepConv(nn.Sequential):  # Keras SeparableConv2D(cout, 3, padding="same", use_bias=False)
        def __init__(self, cin: int, cout: int) -> None:
            super().__init__(nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False), nn.Conv2d(cin, cout, 1, bias=False))

    def bn(c: int):
        return nn.BatchNorm2d(c, eps=1e-3)

    class Down(nn.Module):  # blocks 2-4 and 13: two separable convs and a max pool beside a strided 1x1 conv
        def __init__(self, cin: int, cmid: int, cout: int, first_relu: bool) -> None:
            super().__init__()
            self.residual = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), bn(cout))
            self.body = nn.Sequential(
                *([nn.ReLU()] if first_relu else []), SepConv(cin, cmid), bn(cmid), nn.ReLU(), SepConv(cmid, cout), bn(cout),
                nn.MaxPool2d(3, stride=2, padding=1),
            )

        def forward(self, x):
            return self.body(x) + self.residual(x)

    class Middle(nn.Module):  # blocks 5-12: three separable convs beside the identity
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(*[m for _ in range(3) for m in (nn.ReLU(), SepConv(728, 728), bn(728))])

        def forward(self, x):
            return self.body(x) + x

    class Xception(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, stride=2, bias=False), bn(32), nn.ReLU(),
                nn.Conv2d(32, 64, 3, bias=False), bn(64), nn.ReLU(),
                Down(64, 128, 128, False), Down(128, 256, 256, True), Down(256, 728, 728, True),
                *[Middle() for _ in range(8)],
                Down(728, 728, 1024, True),
                SepConv(1024, 1536), bn(1536), nn.ReLU(), SepConv(1536, 2048), bn(2048), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            )
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            return self.fc(self.features(x))

    return Xception()


def xception_profile(batch: int) -> ModelProfile:
    import torch
    import torch.nn.functional as F

    from commsched.models.inventory import inventory
    from commsched.profile.estimate import estimate_profile

    with torch.device("meta"):
        model = build_xception()
        x = torch.zeros(2, 3, 299, 299)
        y = torch.zeros(2, dtype=torch.long)
    n = sum(p.numel() for p in model.parameters())
    assert n == 22_855_952, n  # Keras Xception's trainable parameters (its 22,910,480 include BN statistics)
    inv = inventory(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y), name="xception")
    return estimate_profile(inv, DEVICE, batch)


def profile_of(name: str) -> ModelProfile:
    if name == "xception":
        return xception_profile(MODELS[name])
    from commsched.profile.zoo_profile import zoo_profile

    return zoo_profile(name, MODELS[name], DEVICE)


# --- cluster and contention -----------------------------------------------------------------------


@dataclass(frozen=True)
class GridVariant:
    """The stand-in grid with two knobs, for finding causes (``--causes``):

    - ``startup_fixed``: a config's relative time scales only c-hat's term, not the startup a
      (LIBRA Eq. 3 and 6: only the rate x depends on r); the grid scales the whole T(c);
    - ``compute_scale`` k: compute's slowdown f - 1 becomes k (f - 1) (k < 1: milder contention).
    """

    base: GridContention
    startup_fixed: bool = False
    compute_scale: float = 1.0
    kind: str = "grid-variant"

    def compute_factor(self, config: ResourceConfig) -> float:
        return 1.0 + self.compute_scale * (self.base.compute_factor(config) - 1.0)

    def allreduce_s(self, cost, nbytes, config: ResourceConfig, overlapped: bool):
        if not self.startup_fixed:
            return self.base.allreduce_s(cost, nbytes, config, overlapped)
        e = self.base.entry(config)
        a = cost.alpha_beta.alpha_s
        t = cost.times_s(nbytes) if np.ndim(nbytes) else cost.time_s(nbytes)
        return (a + (t - a) * e.relative(nbytes)) * (e.overlap_factor if overlapped else 1.0)

    def never_faster_overlapped(self, config: ResourceConfig) -> bool:
        return self.base.never_faster_overlapped(config)

    def to_json(self) -> dict:
        return {"model": self.kind, "startup_fixed": self.startup_fixed, "compute_scale": self.compute_scale}


def libra_cluster(workers: int, startup_fixed: bool = False, compute_scale: float = 1.0) -> ClusterSpec:
    rs = preset("rs-2xv100s-pcie").resources
    assert rs is not None and isinstance(rs.contention, GridContention)
    contention = rs.contention
    if startup_fixed or compute_scale != 1.0:
        contention = GridVariant(rs.contention, startup_fixed, compute_scale)
    return ClusterSpec(
        name="libra-v100-50gb-rdma",
        workers=workers,
        device=DEVICE,
        allreduce=AlgorithmCost("ring", LINK, workers),
        resources=ClusterResources(rs.allowed, rs.default, contention),
        source="LIBRA Section V-A (1 V100 per node, 50 Gbit/s RDMA, ring); alpha 14 us (NCCL tuning.cc); contention: rs-2xv100s-pcie's grid",
    )


# --- the five methods -------------------------------------------------------------------------------


def run_methods(prof: ModelProfile, cluster: ClusterSpec, methods=METHODS, info: dict | None = None) -> dict[str, float]:
    """Scaling factor (T_comp / T_iter) of each method, scored by the resource simulator; ``info``
    (if given) gets each method's bucket count and configs."""
    cost, res = cluster.allreduce, cluster.resources
    assert res is not None
    t_comp = prof.compute_s + prof.optimizer_s
    out: dict[str, float] = {}

    def sf(m, ends, configs=None) -> float:
        configs = list(configs or [res.default] * len(ends))
        tl = simulate_resources(prof, ends, cost, res, configs)
        if info is not None:
            info[m] = (len(ends), sorted({c.short for c in configs}))
        return t_comp / tl.iteration_s

    mg = MGWFBP().ends(prof, cost)
    for m in methods:
        if m == "SE":
            out[m] = sf(m, SyncEASGD().ends(prof, cost))
        elif m == "H-N":
            out[m] = sf(m, Horovod().ends(prof, cost))
        elif m == "H-N v0.20":  # the paper's Horovod v0.20.3: 64 MiB buffers, 5 ms cycle (commsched's horovod-legacy)
            out[m] = sf(m, horovod_legacy().ends(prof, cost))
        elif m == "MG-N":
            out[m] = sf(m, mg)
        elif m == "MG-CF":  # MG-WFBP with no contention at all (Fig. 6's MG-CF)
            out[m] = t_comp / simulate(prof, mg, cost).iteration_s
        elif m == "LIBRA-M":
            configs, _ = libra_fixed(prof, mg, cost, res)
            out[m] = sf(m, mg, configs)
        elif m == "LIBRA":
            ends, configs = Libra().assign(prof, cost, res)
            out[m] = sf(m, ends, configs)
    return out


def gain(r: dict[str, float], a: str, b: str) -> float:
    return r[a] / r[b] - 1.0


def bend(series: dict[int, float], nodes) -> str:
    """Where a curve bends down: the first N at which it is 5% below its value at the first N."""
    first = series[nodes[0]]
    mono = all(series[b] <= series[a] + 1e-12 for a, b in zip(nodes, nodes[1:]))
    below = [n for n in nodes if series[n] < 0.95 * first]
    where = f"5% below at {below[0]}" if below else "never 5% below"
    return f"{'falls' if series[nodes[-1]] < first else 'does not fall'}{'' if mono else ' (not monotone)'}, {where}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="vgg16 at 16 and 2048 nodes only (the test)")
    ap.add_argument("--causes", action="store_true", help="also run the contention-model variants")
    ap.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    args = ap.parse_args()
    t_start = time.perf_counter()
    models = ["vgg16"] if args.quick else (args.models.split(",") if args.models else list(MODELS))
    nodes = (16, 2048) if args.quick else (TESTBED_NODES, *FIG9_NODES)
    fig9 = tuple(n for n in nodes if n >= 16)

    # Eq. 4 against commsched's ring model
    for n in (16, 2048):
        ab = AlgorithmCost("ring", LINK, n).alpha_beta
        assert abs(ab.alpha_s - 2 * (n - 1) * LINK.alpha_s) < 1e-15 and abs(ab.beta_s_per_byte - 2 * (n - 1) / n * LINK.beta_s_per_byte) < 1e-20
    a2048 = AlgorithmCost("ring", LINK, 2048).alpha_beta.alpha_s
    res = libra_cluster(16).resources
    assert res is not None
    print(
        f"cluster: ring over 50 Gbit/s, alpha {LINK.alpha_s * 1e6:.0f} us; Eq. 4 a = 2(N-1) alpha: "
        f"{AlgorithmCost('ring', LINK, 16).alpha_beta.alpha_s * 1e3:.2f} ms at 16 nodes, {a2048 * 1e3:.1f} ms at 2048 "
        f"(commsched's ring row equals Eq. 4: checked)"
    )
    print(
        f"contention (stand-in): rs-2xv100s-pcie grid, default {res.default.short} (compute x{res.contention.compute_factor(res.default):.2f} "
        f"under it), configs {', '.join(c.short for c in res.allowed)}"
    )
    profiles = {}
    for m in models:
        t0 = time.perf_counter()
        p = profiles[m] = profile_of(m)
        print(
            f"{m}: batch {p.batch_size}, {len(p.tensors)} gradient tensors, {p.total_bytes / 4e6:.1f}M parameters, "
            f"compute {p.compute_s * 1e3:.1f} ms on {p.device} (estimated; {time.perf_counter() - t0:.1f} s to profile)"
        )

    results: dict[tuple[str, int], dict[str, float]] = {}
    infos: dict[tuple[str, int], dict] = {}
    for m in models:
        for n in nodes:
            t0 = time.perf_counter()
            extra = ("H-N v0.20",) + (("MG-CF",) if n == TESTBED_NODES else ())
            infos[m, n] = {}
            results[m, n] = run_methods(profiles[m], libra_cluster(n), METHODS + extra, infos[m, n])
            log(f"  {m} N={n}: {time.perf_counter() - t0:.1f} s")

    print("\n## Scaling factor (per-node throughput / single-node throughput)\n")
    shown_methods = METHODS + ("H-N v0.20",)
    for m in models:
        print(f"\n{m}:\n")
        print("| nodes | " + " | ".join(shown_methods) + " | LIBRA/H-N | LIBRA/MG-N | LIBRA/LIBRA-M | H-N/SE | buckets H-N, MG-N, LIBRA | LIBRA-M configs | LIBRA configs |")
        print("|---|" + "---|" * (len(shown_methods) + 7))
        for n in nodes:
            r, i = results[m, n], infos[m, n]
            print(
                f"| {n}{' (V-C)' if n == TESTBED_NODES else ''} | " + " | ".join(f"{r[k]:.3f}" for k in shown_methods)
                + f" | {gain(r, 'LIBRA', 'H-N'):+.1%} | {gain(r, 'LIBRA', 'MG-N'):+.1%} | {gain(r, 'LIBRA', 'LIBRA-M'):+.1%} "
                f"| {gain(r, 'H-N', 'SE'):+.1%} | {i['H-N'][0]}, {i['MG-N'][0]}, {i['LIBRA'][0]} | {' '.join(i['LIBRA-M'][1])} "
                f"| {' '.join(i['LIBRA'][1])} |"
            )

    print("\n## Paper vs ours\n")
    print("| quantity | paper | ours | ratio (ours/paper, as speedups) |")
    print("|---|---|---|---|")
    for (base, m, n), paper in PAPER_FIG9.items():
        if (m, n) in results:
            for b in (base, "H-N v0.20") if base == "H-N" else (base,):
                ours = gain(results[m, n], "LIBRA", b)
                print(f"| LIBRA over {b}, {m}, {n} nodes (Sec. V-D) | {paper:+.1%} | {ours:+.1%} | {(1 + ours) / (1 + paper):.3f} |")
    if TESTBED_NODES in nodes:
        r8 = [results[m, TESTBED_NODES] for m in models]
        for key, paper in PAPER_FIG6.items():
            a, b = key.split("/")
            ours = [gain(r, a, b) for r in r8]
            lo, hi = min(ours), max(ours)
            if isinstance(paper, tuple):
                ratio = f"{(1 + lo) / (1 + paper[0]):.3f} - {(1 + hi) / (1 + paper[1]):.3f}"
                print(f"| {a} over {b}, 8 nodes, range over models (Sec. V-C) | {paper[0]:+.1%} to {paper[1]:+.1%} | {lo:+.1%} to {hi:+.1%} | {ratio} |")
            else:
                mean = float(np.mean(ours))
                print(f"| {a} over {b}, 8 nodes, mean over models (Sec. V-C) | {paper:+.1%} | {mean:+.1%} ({lo:+.1%} to {hi:+.1%}) | {(1 + mean) / (1 + paper):.3f} |")

    print("\n## Qualitative checks (Section V-D text)\n")
    for m in models:
        for k in METHODS:
            print(f"- {m} {k}: {bend({n: results[m, n][k] for n in fig9}, fig9)} "
                  f"({results[m, fig9[0]][k]:.3f} at {fig9[0]}, {results[m, fig9[-1]][k]:.3f} at {fig9[-1]})")
    for m in models:
        best_base = [n for n in fig9 if results[m, n]["LIBRA"] >= max(results[m, n][k] for k in METHODS if k != "LIBRA") - 1e-12]
        g_h = [gain(results[m, n], "LIBRA", "H-N") for n in fig9]
        g_mg = [gain(results[m, n], "LIBRA", "MG-N") for n in fig9]
        se_h = [gain(results[m, n], "H-N", "SE") for n in fig9]
        lm = [gain(results[m, n], "LIBRA-M", "MG-N") for n in fig9]
        gap = {n: gain(results[m, n], "LIBRA", "LIBRA-M") for n in fig9}
        print(
            f"- {m}: LIBRA best of all five at {len(best_base)}/{len(fig9)} node counts; LIBRA over H-N "
            f"{g_h[0]:+.1%} -> {g_h[-1]:+.1%}, over MG-N {g_mg[0]:+.1%} -> {g_mg[-1]:+.1%} (paper: grows); H-N over SE "
            f"{se_h[0]:+.1%} -> {se_h[-1]:+.1%} (paper: shrinks); LIBRA-M over MG-N {lm[0]:+.1%} -> {lm[-1]:+.1%} (paper: > 0); "
            f"LIBRA over LIBRA-M at <= 256: max {max([v for n, v in gap.items() if n <= 256] or [float('nan')]):+.1%}, "
            f"at 512-2048: max {max([v for n, v in gap.items() if n >= 512] or [float('nan')]):+.1%} (paper: notable at 512-2048)"
        )

    if args.causes:
        print("\n## Causes\n")
        grid = res.contention
        d = res.default
        dom = [c.short for c in res.allowed if c != d and grid.entry(c).relative(25 * 10**6) <= grid.entry(d).relative(25 * 10**6)
               and grid.compute_factor(c) <= grid.compute_factor(d)]
        print(f"- grid configs that beat the default {d.short} on both all-reduce time and compute slowdown: {', '.join(dom)} "
              f"({len(dom)} of {len(res.allowed)}); under LIBRA's Eq. 5-6 (both monotone in r) none can")
        # the compute-slowdown scale k at which the stand-in reproduces the paper's own contention gap at 8 nodes
        def mgcf_gap(k: float) -> float:
            return float(np.mean([gain(run_methods(profiles[m], libra_cluster(TESTBED_NODES, False, k), ("MG-N", "MG-CF")), "MG-CF", "MG-N")
                                  for m in models]))
        lo, hi = 0.0, 1.0
        if mgcf_gap(hi) > PAPER_FIG6["MG-CF/MG-N"]:
            for _ in range(30):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if mgcf_gap(mid) < PAPER_FIG6["MG-CF/MG-N"] else (lo, mid)
        k_cal = (lo + hi) / 2
        k_fig1a = (LIBRA_FIG1A_SLOWDOWN - 1) / (grid.compute_factor(ResourceConfig(4, 512)) - 1)
        variants = (
            ("grid as is", False, 1.0),
            ("startup a not scaled by a config's relative time (Eq. 3, 6)", True, 1.0),
            (f"compute slowdown x{k_cal:.3f} (8-node MG-CF/MG-N = Sec. V-C's +10.7%)", False, k_cal),
            (f"compute slowdown x{k_fig1a:.3f} (4x512, r = 2048, = Fig. 1(a)'s +38%)", False, k_fig1a),
            ("no compute slowdown", False, 0.0),
        )
        print("\n| contention variant | default compute x | VGG16@2048 LIBRA/H-N | LIBRA/H-N v0.20 | LIBRA/MG-N | H-N/SE "
              "| 8 nodes: MG-CF/MG-N mean | LIBRA-M/MG-N mean | LIBRA/MG-N range | LIBRA/H-N range |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for label, fixed, k in variants:
            t0 = time.perf_counter()
            row = {}
            for m in models:
                for n in (TESTBED_NODES, 2048):
                    methods = METHODS + ("H-N v0.20",) + (("MG-CF",) if n == TESTBED_NODES else ())
                    row[m, n] = results[m, n] if (not fixed and k == 1.0 and (m, n) in results) else run_methods(profiles[m], libra_cluster(n, fixed, k), methods)
            v = row.get(("vgg16", 2048))
            g8 = [row[m, TESTBED_NODES] for m in models]
            cf = libra_cluster(8, fixed, k).resources.contention.compute_factor(d)
            mean = lambda a, b: f"{np.mean([gain(r, a, b) for r in g8]):+.1%}"  # noqa: E731
            rng = lambda a, b: f"{min(gain(r, a, b) for r in g8):+.1%} to {max(gain(r, a, b) for r in g8):+.1%}"  # noqa: E731
            vgg = (f"{gain(v, 'LIBRA', 'H-N'):+.1%} | {gain(v, 'LIBRA', 'H-N v0.20'):+.1%} | {gain(v, 'LIBRA', 'MG-N'):+.1%} | "
                   f"{gain(v, 'H-N', 'SE'):+.1%}") if v else "- | - | - | -"
            print(f"| {label} | {cf:.2f} | {vgg} | {mean('MG-CF', 'MG-N')} | {mean('LIBRA-M', 'MG-N')} | {rng('LIBRA', 'MG-N')} | {rng('LIBRA', 'H-N')} |")
            log(f"  variant {label!r}: {time.perf_counter() - t0:.1f} s")
        print(f"| paper | ? | +20.0% | +20.0% | +21.0% | ? | +10.7% | +4.1% | +4.2% to +6.2% | +5.8% to +13.8% |")
        # MG-WFBP's collapse into one bucket (MG-N = SE, LIBRA-M's one group after backward): the first N
        # at which it happens, for the alpha used and smaller ones (a = 2(N-1) alpha, Eq. 4)
        print("\nfirst node count at which MG-WFBP makes one bucket (16..2048; '-' = never):\n")
        print("| link alpha | " + " | ".join(models) + " |")
        print("|---|" + "---|" * len(models))
        for alpha in (LINK.alpha_s, LINK.alpha_s / 2, LINK.alpha_s / 4):
            link = LinkParams(alpha_s=alpha, beta_s_per_byte=LINK.beta_s_per_byte)
            first = [next((str(n) for n in FIG9_NODES if len(MGWFBP().ends(profiles[m], AlgorithmCost("ring", link, n))) == 1), "-")
                     for m in models]
            print(f"| {alpha * 1e6:.1f} us | " + " | ".join(first) + " |")

    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
