"""Speed of the planners and of a scaling sweep (issue 2, acceptance item 11).

Run: .venv/bin/python benchmarks/bench_speed.py [--repeats 21]
Profiles are built first (not timed); each timing is repeated and reported as median [min, max].
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commsched.cost.cluster import preset
from commsched.cost.models import Piecewise, Table
from commsched.formats.io import write_json, profile_to_json
from commsched.planners import MGWFBP, STRATEGIES, Optimal
from commsched.profile.zoo_profile import zoo_profile
from commsched.scale import expand_workers, sweep
from commsched.types import ModelProfile, TensorSpec

SCALE_MODELS = (
    "resnet18", "resnet50", "resnet101", "resnet152", "vgg16",
    "googlenet", "densenet121", "densenet201", "inception_v3", "mobilenet_v2",
)


def timed(fn, repeats: int) -> tuple[float, float, float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), max(ts)


def synthetic(n: int, template: ModelProfile) -> ModelProfile:
    """n tensors cycling through a real model's sizes and backward times (a 'very deep' model)."""
    ts = template.tensors
    return ModelProfile(
        "synthetic", template.batch_size, template.device, "estimated", template.forward_s,
        tuple(TensorSpec(f"t{i}", ts[i % len(ts)].bytes, ts[i % len(ts)].backward_s) for i in range(n)),
    )


def all_ready_at_once(n: int, seed: int = 0) -> ModelProfile:
    """Adversarial for the pruned programme: every gradient ready at the same instant."""
    rng = random.Random(seed)
    return ModelProfile(
        "adversarial", 1, "-", "estimated", 0.1,
        tuple(TensorSpec(f"t{i}", rng.choice([1024, 4096, 262144, 2359296]), 0.0) for i in range(n)),
    )


def report(label: str, stats: tuple[float, float, float], target: str) -> None:
    med, lo, hi = stats
    print(f"| {label} | {med * 1e3:.2f} ms | [{lo * 1e3:.2f}, {hi * 1e3:.2f}] | {target} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--resources", action="store_true", help="only the resource planners (issue 12, item 7), timed 3 times")
    ap.add_argument(
        "--resource-models", default="",
        help="with --resources: also time joint and optimal under contention once on each of these zoo models (comma-separated)",
    )
    args = ap.parse_args()
    r = args.repeats
    if args.resources:
        resource_planners(3)
        if args.resource_models:
            resource_planners_by_model([m for m in args.resource_models.split(",") if m])
        return
    cluster = preset("v100-10gbe")
    cost = cluster.allreduce
    piecewise = Piecewise(2e-6, 5e-5, 8e-10, 1e-4, 45_000)  # OSF Eq. 18 shape, for the general path
    # the same curve as measured points (a bench-comm-like table): the general path with interpolation
    grid = [2**k for k in range(2, 31)]
    table = Table(tuple(grid), tuple(piecewise.time_s(b) for b in grid))
    d201 = zoo_profile("densenet201", 64, "V100")
    r152 = zoo_profile("resnet152", 128, "V100")
    syn = synthetic(20_000, r152)
    adv = all_ready_at_once(20_000)
    print("| what | median | [min, max] | target |")
    print("|---|---|---|---|")
    report("optimal, densenet201 (604 tensors), alpha-beta", timed(lambda: Optimal().ends(d201, cost), r), "< 10 ms")
    report("optimal, densenet201, piecewise (general path)", timed(lambda: Optimal().ends(d201, piecewise), r), "-")
    report("mgwfbp, densenet201", timed(lambda: MGWFBP().ends(d201, cost), r), "< 50 ms")
    report("optimal, synthetic 20,000 tensors, alpha-beta", timed(lambda: Optimal().ends(syn, cost), r), "< 1 s")
    report("optimal, synthetic 20,000 tensors, piecewise", timed(lambda: Optimal().ends(syn, piecewise), max(3, r // 4)), "-")
    report("optimal, 20,000 tensors all ready at once, alpha-beta", timed(lambda: Optimal().ends(adv, cost), max(3, r // 4)), "-")
    report("optimal, 20,000 tensors all ready at once, piecewise (worst case)", timed(lambda: Optimal().ends(adv, piecewise), 3), "-")
    report("optimal, 20,000 tensors all ready at once, table (worst case)", timed(lambda: Optimal().ends(adv, table), 3), "-")
    profiles = {m: zoo_profile(m, 32, "K80") for m in SCALE_MODELS}
    workers = expand_workers("4,8,...,2048")
    planners = list(STRATEGIES.values())
    k80 = preset("k80-10gbe")
    report(
        f"scale sweep: {len(profiles)} models x {len(planners)} strategies x {len(workers)} worker counts",
        timed(lambda: sweep(profiles, k80, workers, planners), max(3, r // 4)),
        "< 5 s",
    )
    # The same sweep as a user runs it: a fresh `commsched scale` process reading the 10 profiles
    # from files, simulating, writing the CSV and plotting the PNG.
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "commsched", "scale", "--cluster", "k80-10gbe", "--workers", "4,8,...,2048", "--out", tmp]
        for name, prof in profiles.items():
            path = Path(tmp) / f"{name}.json"
            write_json(path, profile_to_json(prof))
            cmd += ["--profile", str(path)]
        report(
            "the same sweep end to end: `commsched scale --profile ...` (process start, CSV, PNG)",
            timed(lambda: subprocess.run(cmd, check=True, capture_output=True), 3),
            "-",
        )


def resource_planners(r: int) -> None:
    """Issue 12, item 7: libra (K = 10, Z = 150, 16 configs) on resnet152, joint on resnet50, and
    optimal under contention on densenet201 at its default tolerance, on the rs-2xv100s-pcie preset
    (batch 32, V100S); optimal plans for the default config's contention (compute x2.33)."""
    from commsched.planners import Joint, Libra
    from commsched.planners.resources import default_config_semantics

    c = preset("rs-2xv100s-pcie")
    res = c.resources
    profs = {m: zoo_profile(m, 32, "V100S") for m in ("resnet50", "resnet152", "densenet201")}
    print("| what | median | [min, max] | target |")
    print("|---|---|---|---|")
    report("libra (K = 10, Z = 150, 16 configs), resnet152 (466 tensors)", timed(lambda: Libra().assign(profs["resnet152"], c.allreduce, res), r), "< 5 s")
    report("joint (tolerance 0.01), resnet50 (161 tensors)", timed(lambda: Joint().assign(profs["resnet50"], c.allreduce, res), r), "< 1 s")
    sem = default_config_semantics(res)
    report("optimal under contention (tolerance 0.01), densenet201 (604 tensors)", timed(lambda: Optimal(sem).ends(profs["densenet201"], c.allreduce), r), "< 10 s")


def resource_planners_by_model(models: list[str]) -> None:
    """The models the targets of issue 12, item 7 did not name: joint and optimal under contention
    (the default config's contention), each timed once, on rs-2xv100s-pcie (batch 32, V100S), with
    the number of buckets each plans."""
    from commsched.planners import Joint
    from commsched.planners.resources import default_config_semantics

    c = preset("rs-2xv100s-pcie")
    sem = default_config_semantics(c.resources)
    print("\n| model | tensors | joint | optimal under contention |")
    print("|---|---|---|---|")
    for m in models:
        p = zoo_profile(m, 32, "V100S")
        t0 = time.perf_counter()
        joint_ends = Joint().assign(p, c.allreduce, c.resources)[0]
        t1 = time.perf_counter()
        opt_ends = Optimal(sem).ends(p, c.allreduce)
        t2 = time.perf_counter()
        print(f"| {m} | {len(p.tensors)} | {t1 - t0:.2f} s ({len(joint_ends)} buckets) | {t2 - t1:.2f} s ({len(opt_ends)}) |")


if __name__ == "__main__":
    main()
