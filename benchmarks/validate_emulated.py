"""Prediction vs measurement on the emulated 2-node cluster (issue 3, benchmarks).

Run (as root, from the repo): .venv/bin/python benchmarks/validate_emulated.py [--rate-mbit 2000]
For each model it runs

    commsched emulate --nodes 2 --rate-mbit R -- -m commsched validate --model M ... --out out/bench/M

and prints one markdown table of every strategy's predicted and measured step time, plus the
checks of the issue: prediction error (median, worst), optimal vs the best of ddp/wfbp/synceasgd and
vs ddp, and commsched-with-DDP's-buckets vs stock DDP.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

MODELS = {  # CPU-friendly sizes
    "resnet18": ["--batch-size", "16", "--image-size", "64"],
    "resnet50": ["--batch-size", "8", "--image-size", "64"],
    "bert_small": ["--batch-size", "8"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-mbit", default="2000")
    ap.add_argument("--rounds", default="12")
    ap.add_argument("--steps", default="2")
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--report-only", action="store_true", help="summarise the validate.json files already in --out")
    args = ap.parse_args()
    reports = {}
    for model in args.models.split(","):
        out = Path(args.out).resolve() / model
        cmd = [
            sys.executable, "-m", "commsched", "emulate", "--nodes", "2", "--rate-mbit", args.rate_mbit, "--",
            "-m", "commsched", "validate", "--model", model, *MODELS[model],
            "--rounds", args.rounds, "--steps", args.steps, "--out", str(out),
        ]
        if not args.report_only:
            print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        reports[model] = json.loads((out / "validate.json").read_text())
    print("| model | strategy | buckets | predicted ms | measured ms (median [min, max]) | error [95% interval] | error, numbers before run |")
    print("|---|---|---|---|---|---|---|")
    for model, rep in reports.items():
        for name, r in sorted(rep["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
            print(
                f"| {model} | {name} | {r['buckets']} | {r['iteration_s'] * 1e3:.1f} | "
                f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}] | "
                f"{r['error']:+.1%} [{r['error_ci95'][0]:+.1%}, {r['error_ci95'][1]:+.1%}] | {r['error_before_run']:+.1%} |"
            )
        s = rep["stock_ddp"]
        print(f"| {model} | stock DDP | - | - | {s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}] | - | - |")
    rows = [r for rep in reports.values() for r in rep["strategies"].values()]
    errors = [abs(r["error"]) for r in rows]
    before = [abs(r["error_before_run"]) for r in rows]
    inside = sum(lo <= 0 <= hi for lo, hi in (r["error_ci95"] for r in rows))
    within = sum(-0.1 <= lo and hi <= 0.1 for lo, hi in (r["error_ci95"] for r in rows))
    print(
        f"\nprediction error over all models and strategies: median {statistics.median(errors):.1%}, worst {max(errors):.1%} "
        f"(numbers before the run: median {statistics.median(before):.1%}, worst {max(before):.1%}); "
        f"95% interval holds 0 in {inside}/{len(rows)}, lies within +-10% in {within}/{len(rows)}"
    )
    for model, rep in reports.items():
        st = rep["strategies"]
        base = min(("ddp", "wfbp", "synceasgd"), key=lambda k: st[k]["measured_s"])
        c = rep["contention"]
        print(
            f"{model}: optimal {st['optimal']['measured_s'] * 1e3:.1f} ms, faster than {base} (the best of "
            f"ddp/wfbp/synceasgd) by {speedup(st[base]['steps_s'], st['optimal']['steps_s'])}, than ddp by "
            f"{speedup(st['ddp']['steps_s'], st['optimal']['steps_s'])}; commsched with DDP's buckets slower than stock "
            f"DDP by {speedup(st['ddp']['steps_s'], rep['stock_ddp']['steps_s'])}; "
            f"contention: compute {c['compute_slowdown']:+.0%}, all-reduce {c['comm_slowdown']:+.0%}; "
            f"all-reduce fit: {rep['cluster']['allreduce']['model']}"
        )


def speedup(slow: list[float], fast: list[float], resamples: int = 2000) -> str:
    """median(slow) / median(fast) - 1 with a 95% bootstrap interval (steps resampled with replacement)."""
    rng = random.Random(0)

    def resample(xs):
        return statistics.median(xs[rng.randrange(len(xs))] for _ in xs)

    ratios = sorted(resample(slow) / resample(fast) - 1 for _ in range(resamples))
    point = statistics.median(slow) / statistics.median(fast) - 1
    return f"{point:+.1%} [{ratios[int(0.025 * resamples)]:+.1%}, {ratios[int(0.975 * resamples) - 1]:+.1%}]"

if __name__ == "__main__":
    main()
