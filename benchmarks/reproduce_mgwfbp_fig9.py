"""MG-WFBP Figure 9 (Section 6.3.2): WFBP, SyncEASGD and MG-WFBP on the two 16-GPU V100 clusters.

Cluster 2 (10GbE) and cluster 3 (56GbIB) are commsched's presets ``v100-10gbe`` and ``v100-56gbib``:
the Fig. 4 fits at 16 workers (the clusters' size, so no rescaling). Models and batch sizes are
Table IV's: ResNet-152 (128), DenseNet-161 (64), DenseNet-201 (64) as torchvision builds them (the
authors' dl_trainer.py uses torchvision for these three), Inception-v4 (128) as the authors'
models/inceptionv4.py lays it out (benchmarks/paper_profiles.py; the zoo has no Inception-v4).
Layer times are FLOP estimates on a V100 PCIe (OSF Eq. 4-6). Mixed precision is run as FP16
gradients (half the bytes; ``zoo_profile(..., dtype="fp16")``) with FP32 compute times: commsched's
estimate has no tensor-core speed-up, and the paper gives no compute time for its FP16 runs.

Figure 9 plots times only; what is in text is compared: the caption's range of MG-WFBP's
improvement "over WFBP and SyncEASGD" per panel (read here as the min and max of
t_other / t_MG-WFBP - 1 over both baselines and both precisions, the four bars of a panel), and
Section 6.3.2's statements: up to 70% on cluster 2 and 26% on cluster 3; ResNet-152 FP32: WFBP about
10% faster than SyncEASGD and MG-WFBP 10% more; DenseNet-161: SyncEASGD 20% faster than WFBP and
MG-WFBP 7% faster than SyncEASGD; up to 15% over the best of WFBP and SyncEASGD.

Run: .venv/bin/python benchmarks/reproduce_mgwfbp_fig9.py [--models resnet152,densenet161,densenet201,inception_v4]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commsched.cost.cluster import preset
from commsched.cost.models import as_alpha_beta
from commsched.formats.io import load_profile
from commsched.planners import MGWFBP, SyncEASGD, WFBP, make_plan
from commsched.profile.zoo_profile import zoo_profile
from commsched.types import ModelProfile

HERE = Path(__file__).resolve().parent
BATCH = {"resnet152": 128, "densenet161": 64, "densenet201": 64, "inception_v4": 128}  # Table IV
# Figure 9 caption: range of improvements per panel, (a)-(d) cluster 2, (e)-(h) cluster 3.
PAPER_RANGE = {
    ("v100-10gbe", "resnet152"): (0.01, 0.20),
    ("v100-10gbe", "densenet161"): (0.07, 0.70),
    ("v100-10gbe", "densenet201"): (0.07, 0.69),
    ("v100-10gbe", "inception_v4"): (0.12, 0.39),
    ("v100-56gbib", "resnet152"): (0.02, 0.09),
    ("v100-56gbib", "densenet161"): (0.02, 0.24),
    ("v100-56gbib", "densenet201"): (0.06, 0.26),
    ("v100-56gbib", "inception_v4"): (0.02, 0.18),
}
PAPER_UP_TO = {"v100-10gbe": 0.70, "v100-56gbib": 0.26}  # Section 6.3.2
CLUSTERS = ("v100-10gbe", "v100-56gbib")


def profile(model: str, dtype: str) -> ModelProfile:
    if model == "inception_v4":
        path = HERE / "data" / f"mgwfbp-inception_v4-v100-b128{'-fp16' if dtype == 'fp16' else ''}.json"
        if path.exists():
            return load_profile(path)
        sys.path.insert(0, str(HERE))
        from paper_profiles import paper_profile

        return paper_profile("inception_v4", 128, "V100", None if dtype == "fp32" else dtype)
    return zoo_profile(model, BATCH[model], "V100", dtype=dtype)


def times(prof: ModelProfile, cluster: str) -> dict[str, tuple[float, int]]:
    cost = preset(cluster).allreduce
    out = {}
    for p in (WFBP(), SyncEASGD(), MGWFBP()):
        plan = make_plan(p, prof, cost)
        out[p.name] = (plan.predicted.iteration_s, len(plan.buckets))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(BATCH))
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    args = ap.parse_args()
    models = args.models.split(",")
    clusters = args.clusters.split(",")
    res = {}
    for m in models:
        for dtype in ("fp32", "fp16"):
            prof = profile(m, dtype)
            for c in clusters:
                res[c, m, dtype] = (prof, times(prof, c))
    print("MG-WFBP Figure 9: 16 workers; improvement = t_baseline / t_MG-WFBP - 1")
    for c in clusters:
        print(f"\n### {c} (16 workers)\n")
        print(
            "| model | tensors | compute ms | FP32 WFBP / SE / MG ms | MG buckets | FP16 WFBP / SE / MG ms | MG buckets "
            "| over WFBP FP32 | over SE FP32 | over WFBP FP16 | over SE FP16 | paper range | ours range | ratio of upper ends |"
        )
        print("|" + "---|" * 14)
        for m in models:
            cells, imps = [], []
            for dtype in ("fp32", "fp16"):
                prof, t = res[c, m, dtype]
                cells.append(" / ".join(f"{t[s][0] * 1e3:.1f}" for s in ("wfbp", "synceasgd", "mgwfbp")))
                cells.append(str(t["mgwfbp"][1]))
                imps += [t["wfbp"][0] / t["mgwfbp"][0] - 1, t["synceasgd"][0] / t["mgwfbp"][0] - 1]
            prof = res[c, m, "fp32"][0]
            lo, hi = PAPER_RANGE[c, m]
            print(
                f"| {m} | {len(prof.tensors)} | {prof.compute_s * 1e3:.1f} | {' | '.join(cells)} | "
                f"{imps[0]:.0%} | {imps[1]:.0%} | {imps[2]:.0%} | {imps[3]:.0%} | {lo:.0%}-{hi:.0%} | "
                f"{min(imps):.0%}-{max(imps):.0%} | {max(imps) / hi:.2f} |"
            )

    def imp(c: str, m: str, dtype: str, base: str) -> float:
        t = res[c, m, dtype][1]
        return t[base][0] / t["mgwfbp"][0] - 1

    print("\n### Section 6.3.2's statements, paper vs ours\n")
    print("| statement | paper | ours |")
    print("|---|---|---|")
    for c in clusters:
        best = max(imp(c, m, d, b) for m in models for d in ("fp32", "fp16") for b in ("wfbp", "synceasgd"))
        print(f"| {c}: MG-WFBP's largest improvement over WFBP and SyncEASGD | up to {PAPER_UP_TO[c]:.0%} | {best:.0%} |")
    for c in clusters:
        if "resnet152" in models:
            t = res[c, "resnet152", "fp32"][1]
            print(
                f"| {c}, ResNet-152 FP32: WFBP faster than SyncEASGD by | about 10% | "
                f"{t['synceasgd'][0] / t['wfbp'][0] - 1:+.0%} |"
            )
            print(f"| {c}, ResNet-152 FP32: MG-WFBP faster than WFBP by | extra 10% | {imp(c, 'resnet152', 'fp32', 'wfbp'):+.0%} |")
        if "densenet161" in models:
            t = res[c, "densenet161", "fp32"][1]
            print(
                f"| {c}, DenseNet-161 FP32: SyncEASGD faster than WFBP by | 20% | "
                f"{t['wfbp'][0] / t['synceasgd'][0] - 1:+.0%} |"
            )
            print(f"| {c}, DenseNet-161 FP32: MG-WFBP faster than SyncEASGD by | 7% | {imp(c, 'densenet161', 'fp32', 'synceasgd'):+.0%} |")
    over_best = max(
        min(res[c, m, d][1]["wfbp"][0], res[c, m, d][1]["synceasgd"][0]) / res[c, m, d][1]["mgwfbp"][0] - 1
        for c in clusters
        for m in models
        for d in ("fp32", "fp16")
    )
    print(f"| MG-WFBP over the best of WFBP and SyncEASGD, largest | up to 15% | {over_best:.0%} |")

    # WFBP issues one all-reduce per tensor (the authors' code with threshold 0 puts every tensor in its own
    # group), so its iteration is at least the sum of their costs, n a + b M (Eq. 10), whatever the compute.
    # The caption's upper end bounds t_WFBP / t_MG - 1 in FP32, hence t_MG >= (n a + b M) / (1 + upper end).
    print("\n### What the caption's upper ends imply for the paper's FP32 MG-WFBP iteration (Eq. 10, 16 workers)\n")
    print("| cluster | model | n x a ms | b x M ms | WFBP >= ms | paper upper end | paper MG-WFBP >= ms | ours MG-WFBP ms | our compute ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in clusters:
        ab = as_alpha_beta(preset(c).allreduce)
        for m in models:
            prof, t = res[c, m, "fp32"]
            na, bm = len(prof.tensors) * ab.alpha_s, prof.total_bytes * ab.beta_s_per_byte
            hi = PAPER_RANGE[c, m][1]
            print(
                f"| {c} | {m} | {na * 1e3:.1f} | {bm * 1e3:.1f} | {(na + bm) * 1e3:.1f} | {hi:.0%} | "
                f"{(na + bm) / (1 + hi) * 1e3:.1f} | {t['mgwfbp'][0] * 1e3:.1f} | {prof.compute_s * 1e3:.1f} |"
            )


if __name__ == "__main__":
    main()
