"""MG-WFBP Figure 10 (Section 6.4): the simulated K80 10GbE cluster with ring all-reduce, 4..2048 workers.

The paper simulates WFBP, SyncEASGD and MG-WFBP for GoogleNet and ResNet-50 from layer times
measured on one K80 and the cluster-1 fit of Fig. 4 (a = 9.72e-4 s, b = 1.97e-9 s/byte at 16
workers), scaled to N workers by Table II's ring row. commsched's ``k80-10gbe`` preset is that fit
read as ring links (commsched.cost.cluster.ring_link_from_fit), so ``with_workers(N)`` is the same
scaling. Layer times here are FLOP estimates on a GK210 (OSF Eq. 4-6, commsched.profile.devices), batch
sizes from Table IV (GoogleNet 64, ResNet-50 32).

Figure 10's values are only plotted; the text (Section 6.4) states: MG-WFBP's merged-gradient layer
counts n = [10,6,6,5,3,2,1,...,1] (GoogleNet) and [33,19,10,7,5,3,1,...,1] (ResNet-50) at
p = 2^2..2^11 workers; at 64 workers MG-WFBP is 1.78x / 1.35x faster than WFBP / SyncEASGD on
GoogleNet and 1.75x / 1.45x on ResNet-50; on ResNet-50 at 64 workers MG-WFBP is "almost linear" and
WFBP and SyncEASGD "only have around 55% scaling efficiency"; WFBP beats SyncEASGD at 4-16 workers
and SyncEASGD beats WFBP at 64; from 256 workers MG-WFBP converges to SyncEASGD (n = 1).
n is read as the number of all-reduces (groups): at 2048 workers n = 1 can only be one group.

GoogleNet runs twice: the zoo's (torchvision: BatchNorm, auxiliary heads, 187 gradient tensors) and
the paper's (the authors' models/googlenet.py: no BatchNorm, no auxiliary heads, 59 tensors, Table
IV), built by benchmarks/paper_profiles.py into benchmarks/data/mgwfbp-googlenet-k80-b64.json.
ResNet-50 is torchvision's in both (the authors' dl_trainer.py builds torchvision.models.resnet50:
161 tensors, Table IV).

Run: .venv/bin/python benchmarks/reproduce_mgwfbp_fig10.py [--workers 4,8,...,2048] [--googlenet zoo|paper|both]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from commsched.cost.cluster import preset
from commsched.cost.models import as_alpha_beta
from commsched.formats.io import load_profile
from commsched.planners import MGWFBP, SyncEASGD, WFBP, make_plan
from commsched.profile.zoo_profile import zoo_profile
from commsched.scale import expand_workers
from commsched.types import ModelProfile

HERE = Path(__file__).resolve().parent
PAPER_GOOGLENET = HERE / "data" / "mgwfbp-googlenet-k80-b64.json"
CLUSTER = "k80-10gbe"

# Section 6.4 text: MG-WFBP's n at p = 4, 8, ..., 2048 workers (ring).
PAPER_N = {
    "googlenet": dict(zip(expand_workers("4,8,...,2048"), [10, 6, 6, 5, 3, 2, 1, 1, 1, 1])),
    "resnet50": dict(zip(expand_workers("4,8,...,2048"), [33, 19, 10, 7, 5, 3, 1, 1, 1, 1])),
}
# Section 6.4 text: 64-worker speedups of MG-WFBP over WFBP and over SyncEASGD (ring).
PAPER_64 = {"googlenet": (1.78, 1.35), "resnet50": (1.75, 1.45)}


@dataclass(frozen=True)
class Point:
    workers: int
    wfbp_s: float
    synceasgd_s: float
    mgwfbp_s: float
    mgwfbp_buckets: int
    compute_s: float

    @property
    def over_wfbp(self) -> float:
        return self.wfbp_s / self.mgwfbp_s

    @property
    def over_synceasgd(self) -> float:
        return self.synceasgd_s / self.mgwfbp_s

    def efficiency(self, t: float) -> float:
        """Scaling efficiency: compute / iteration (1 = linear speedup; MG-WFBP Section 6.4's sense)."""
        return self.compute_s / t


def profiles(which: str, resnet50: bool = True) -> dict[str, ModelProfile]:
    """GoogleNet (zoo and/or the paper's) and ResNet-50 on a K80, Table IV batch sizes."""
    out: dict[str, ModelProfile] = {}
    if which in ("zoo", "both"):
        out["googlenet (zoo, torchvision)"] = zoo_profile("googlenet", 64, "K80")
    if which in ("paper", "both"):
        if PAPER_GOOGLENET.exists():
            out["googlenet (paper, 59 tensors)"] = load_profile(PAPER_GOOGLENET)
        else:  # build it as benchmarks/paper_profiles.py would
            sys.path.insert(0, str(HERE))
            from paper_profiles import paper_profile

            out["googlenet (paper, 59 tensors)"] = paper_profile("googlenet", 64, "K80")
    if resnet50:
        out["resnet50 (zoo = paper's)"] = zoo_profile("resnet50", 32, "K80")
    return out


def scaled(prof: ModelProfile, k: float) -> ModelProfile:
    """The profile with forward and every backward time x k (a uniformly faster or slower K80)."""
    return replace(prof, forward_s=prof.forward_s * k, tensors=tuple(replace(t, backward_s=t.backward_s * k) for t in prof.tensors))


def print_causes(profs: dict[str, ModelProfile], n: int, algorithm: str) -> None:
    """What WFBP pays at n workers: one startup a(n) per tensor (MG-WFBP Eq. 10 with Table II's a), and
    b(n) x bytes once; and how many tensors become ready less than a(n) after the one before (FLOP
    estimates give 0 s to a layer's second parameter, e.g. a BatchNorm bias), which MG-WFBP merges
    whenever their predecessor's all-reduce has not started (Eq. 38)."""
    cost = preset(CLUSTER).with_algorithm(algorithm).with_workers(n).allreduce
    ab = as_alpha_beta(cost)  # Table II: ring a = 2(N-1) alpha, b = 2(N-1)/N beta
    a, b = ab.alpha_s, ab.beta_s_per_byte
    print(f"\n### What WFBP pays at {n} workers ({algorithm}: a = {a * 1e3:.3f} ms, b = {b * 1e9:.3f} ns/byte)\n")
    print("| model | tensors | tensors x a, ms | b x bytes, ms | backward ms | tensors ready < a after the previous |")
    print("|---|---|---|---|---|---|")
    for label, prof in profs.items():
        close = sum(1 for t in prof.tensors[1:] if t.backward_s < a)
        print(
            f"| {label} | {len(prof.tensors)} | {len(prof.tensors) * a * 1e3:.1f} | {b * prof.total_bytes * 1e3:.1f} | "
            f"{prof.backward_s * 1e3:.1f} | {close} |"
        )


def print_sensitivity(profs: dict[str, ModelProfile], workers: list[int], algorithm: str, ks: tuple[float, ...]) -> None:
    """Does one uniform factor on our layer times (a K80 faster or slower than the FLOP estimate)
    reproduce the paper's n and 64-worker speedups at once?"""
    print("\n### Layer times x k: MG-WFBP's n and the 64-worker speedups\n")
    print("| model | k | ours n | paper n | MG/WFBP x (paper) | MG/SyncEASGD x (paper) |")
    print("|---|---|---|---|---|---|")
    for label, prof in profs.items():
        key = paper_key(label)
        for k in ks:
            pts = sweep(scaled(prof, k), workers, algorithm)
            at = {p.workers: p for p in pts}
            ns = ",".join(str(p.mgwfbp_buckets) for p in pts)
            pn = ",".join(str(PAPER_N[key][p.workers]) for p in pts)
            r = (f"{at[64].over_wfbp:.2f} ({PAPER_64[key][0]}) | {at[64].over_synceasgd:.2f} ({PAPER_64[key][1]})"
                 if 64 in at else "- | -")
            print(f"| {label} | {k:g} | {ns} | {pn} | {r} |")


def sweep(prof: ModelProfile, workers: list[int], algorithm: str) -> list[Point]:
    base = preset(CLUSTER).with_algorithm(algorithm)
    pts = []
    for n in workers:
        cost = base.with_workers(n).allreduce
        plans = {p.name: make_plan(p, prof, cost) for p in (WFBP(), SyncEASGD(), MGWFBP())}
        t = {k: v.predicted.iteration_s for k, v in plans.items()}
        pts.append(Point(n, t["wfbp"], t["synceasgd"], t["mgwfbp"], len(plans["mgwfbp"].buckets), prof.compute_s))
    return pts


def paper_key(label: str) -> str:
    return label.split(" ")[0]


def print_sweep(label: str, prof: ModelProfile, pts: list[Point], with_paper_n: bool = True) -> None:
    print(
        f"\n### {label}: {len(prof.tensors)} gradient tensors, {prof.total_bytes / 2**20:.1f} MiB, batch {prof.batch_size}, "
        f"compute {prof.compute_s * 1e3:.1f} ms ({prof.device}, {prof.source})\n"
    )
    head = "| workers | paper n | ours n | ratio | MG/WFBP x | MG/SyncEASGD x | eff WFBP | eff SyncEASGD | eff MG-WFBP |"
    if not with_paper_n:
        head = "| workers | ours n | MG/WFBP x | MG/SyncEASGD x | eff WFBP | eff SyncEASGD | eff MG-WFBP |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for p in pts:
        effs = f"{p.efficiency(p.wfbp_s):.2f} | {p.efficiency(p.synceasgd_s):.2f} | {p.efficiency(p.mgwfbp_s):.2f}"
        if with_paper_n:
            pn = PAPER_N[paper_key(label)].get(p.workers)
            ratio = f"{p.mgwfbp_buckets / pn:.2f}" if pn else "-"
            print(
                f"| {p.workers} | {pn if pn else '-'} | {p.mgwfbp_buckets} | {ratio} | {p.over_wfbp:.3f} | "
                f"{p.over_synceasgd:.3f} | {effs} |"
            )
        else:
            print(f"| {p.workers} | {p.mgwfbp_buckets} | {p.over_wfbp:.3f} | {p.over_synceasgd:.3f} | {effs} |")


def crossing(pts: list[Point]) -> str:
    """Smallest worker count where SyncEASGD is faster than WFBP (the 'crossing point' of Fig. 10)."""
    for p in pts:
        if p.synceasgd_s < p.wfbp_s:
            return str(p.workers)
    return "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="4,8,...,2048")
    ap.add_argument("--googlenet", choices=("zoo", "paper", "both"), default="both")
    ap.add_argument("--no-resnet50", action="store_true", help="GoogleNet only (fast)")
    ap.add_argument("--sensitivity", default="0.35,0.5,0.7,1,1.5,2", help="layer-time factors k to try ('' for none)")
    args = ap.parse_args()
    workers = expand_workers(args.workers)
    print(f"MG-WFBP Figure 10: {CLUSTER}, ring all-reduce, workers {','.join(map(str, workers))}")
    summary = []
    profs = profiles(args.googlenet, not args.no_resnet50)
    for label, prof in profs.items():
        pts = sweep(prof, workers, "ring")
        print_sweep(label, prof, pts)
        by_n = {p.workers: p for p in pts}
        summary.append((label, by_n, crossing(pts)))
    print("\n### Section 6.4's statements, paper vs ours\n")
    print("| model | quantity | paper | ours | ratio (ours / paper) |")
    print("|---|---|---|---|---|")
    for label, by_n, cross in summary:
        key = paper_key(label)
        if 64 in by_n:
            p = by_n[64]
            wf, se = PAPER_64[key]
            print(f"| {label} | MG-WFBP over WFBP, 64 workers | {wf:.2f}x | {p.over_wfbp:.2f}x | {p.over_wfbp / wf:.2f} |")
            print(f"| {label} | MG-WFBP over SyncEASGD, 64 workers | {se:.2f}x | {p.over_synceasgd:.2f}x | {p.over_synceasgd / se:.2f} |")
            if key == "resnet50":
                for name, t in (("WFBP", p.wfbp_s), ("SyncEASGD", p.synceasgd_s)):
                    e = p.efficiency(t)
                    print(f"| {label} | {name} scaling efficiency, 64 workers | ~55% | {e:.0%} | {e / 0.55:.2f} |")
                print(f"| {label} | MG-WFBP scaling efficiency, 64 workers | almost linear | {p.efficiency(p.mgwfbp_s):.0%} | - |")
        print(f"| {label} | first worker count where SyncEASGD beats WFBP | 32 or 64 (after 16, by 64) | {cross} | - |")
        ones = [n for n, p in by_n.items() if n >= 256 and p.mgwfbp_buckets != 1]
        if any(n >= 256 for n in by_n):
            print(f"| {label} | MG-WFBP is one all-reduce from 256 workers | yes | {'yes' if not ones else 'no, not at ' + ','.join(map(str, ones))} | - |")
    for n in (4, 64):
        if n in workers:
            print_causes(profs, n, "ring")
    ks = tuple(float(k) for k in args.sensitivity.split(",") if k)
    if ks:
        print_sensitivity({k: v for k, v in profs.items() if "zoo, torchvision" not in k}, workers, "ring", ks)


if __name__ == "__main__":
    main()
