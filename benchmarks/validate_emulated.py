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
    ap.add_argument("--rounds", default="5")
    ap.add_argument("--steps", default="4")
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    reports = {}
    for model in args.models.split(","):
        out = Path(args.out).resolve() / model
        cmd = [
            sys.executable, "-m", "commsched", "emulate", "--nodes", "2", "--rate-mbit", args.rate_mbit, "--",
            "-m", "commsched", "validate", "--model", model, *MODELS[model],
            "--rounds", args.rounds, "--steps", args.steps, "--out", str(out),
        ]
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        reports[model] = json.loads((out / "validate.json").read_text())
    print("| model | strategy | buckets | predicted ms | measured ms (median [min, max]) | error |")
    print("|---|---|---|---|---|---|")
    for model, rep in reports.items():
        for name, r in sorted(rep["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
            print(
                f"| {model} | {name} | {r['buckets']} | {r['iteration_s'] * 1e3:.1f} | "
                f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}] | {r['error']:+.1%} |"
            )
        s = rep["stock_ddp"]
        print(f"| {model} | stock DDP | - | - | {s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}] | - |")
    errors = [abs(r["error"]) for rep in reports.values() for r in rep["strategies"].values()]
    print(f"\nprediction error over all models and strategies: median {statistics.median(errors):.1%}, worst {max(errors):.1%}")
    for model, rep in reports.items():
        st = rep["strategies"]
        best_base = min(st[k]["measured_s"] for k in ("ddp", "wfbp", "synceasgd"))
        ddp = st["ddp"]["measured_s"]
        c = rep["contention"]
        planned = ", ".join(
            f"{name} {st[name]['measured_s'] * 1e3:.1f} ms ({best_base / st[name]['measured_s'] - 1:+.1%} vs the best of "
            f"ddp/wfbp/synceasgd, {ddp / st[name]['measured_s'] - 1:+.1%} vs ddp)"
            for name in ("optimal", "contended") if name in st
        )
        print(
            f"{model}: {planned}; commsched with DDP's buckets vs stock DDP {rep['overhead_vs_stock_ddp']:+.1%}; "
            f"contention: compute {c['compute_slowdown']:+.0%}, all-reduce {c['comm_slowdown']:+.0%}; "
            f"all-reduce fit: {rep['cluster']['allreduce']['model']}"
        )

if __name__ == "__main__":
    main()
