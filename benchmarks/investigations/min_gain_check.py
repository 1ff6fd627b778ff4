"""`optimal`'s min gain over stock DDP on stored `validate` runs (issue 11, item 7): for each run, the
gain the planner predicted for `optimal` over stock DDP's defaults (both from the numbers measured
before the rounds, as the plans were made), the measured speedup with its 95% interval, and what a
min gain G would have done: apply the plan (predicted gain at least G: t_stock / t_optimal >=
1 / (1 - G)) or keep stock DDP's buckets (then measured by the run's `ddp` row: stock DDP's default
buckets through caps). A run made with min gain G decided itself: its `optimal` row is the choice
(its predicted gain is then 0 where it kept stock DDP's buckets).

Run (from the repo, no cluster needed; each argument a directory of runs, one folder per model, as
``benchmarks/validate_emulated.py`` writes them):
    .venv/bin/python benchmarks/investigations/min_gain_check.py out/bench-o/500 out/bench-o/2000 --min-gain 0.03
"""

import argparse
from pathlib import Path

from commsched.calibrate import load_validate_report


def decision(report: dict, min_gain: float) -> tuple[float, str, dict]:
    """(predicted gain, "apply" or "keep", the row that measures that choice) of one stored run. The
    gain is the planner's own: the `ddp` plan's predicted iteration (stock DDP's default buckets,
    through caps) over `optimal`'s, as both were planned."""
    plans, rows = report["plans"], report["strategies"]
    if [b["tensors"] for b in plans["ddp"]["buckets"]] != [b["tensors"] for b in plans["optimal"]["buckets"]]:
        if rows["ddp"]["buckets"] != report["stock_ddp"]["buckets"]:
            raise SystemExit(f"{report['model']}: the ddp plan is not stock DDP's buckets")
    gain = plans["ddp"]["predicted"]["iteration_s"] / plans["optimal"]["predicted"]["iteration_s"] - 1
    if gain >= min_gain / (1 - min_gain) - 1e-12:
        return gain, "apply", rows["optimal"]
    return gain, "keep", rows["ddp"]  # stock DDP's own buckets, through caps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--min-gain", type=float, default=0.03)
    args = ap.parse_args()
    lows = []
    print("| run | optimal buckets | predicted gain | measured speedup [95%] | min gain | choice | measured speedup of the choice [95%] |")
    print("|---|---|---|---|---|---|---|")
    for runs in args.runs:
        for root in sorted(runs.iterdir()):
            report = load_validate_report(root / "validate.json")
            opt = report["strategies"]["optimal"]
            gain, choice, row = decision(report, args.min_gain)
            asked = report.get("min_gain", 0.0)  # the run's own (0 before the option existed)
            if asked == args.min_gain:  # the run made this choice itself: its optimal row measures it
                choice, row = ("keep" if opt["buckets"] == report["stock_ddp"]["buckets"] and gain == 0 else "apply"), opt
            cell = f"{row['speedup_vs_stock_ddp']:.3f} [{row['speedup_ci95'][0]:.3f}, {row['speedup_ci95'][1]:.3f}]"
            lo, hi = opt["speedup_ci95"]
            print(f"| {root} | {opt['buckets']} | {gain:+.1%} | {opt['speedup_vs_stock_ddp']:.3f} [{lo:.3f}, {hi:.3f}] | {asked:g} | {choice} | {cell} |")
            lows.append((row["speedup_ci95"][1], row["speedup_ci95"][0], str(root)))
    worst = min(lows)
    print(f"\nmin gain {args.min_gain:g}: lowest upper bound of the choice's 95% interval {worst[0]:.3f} ({worst[2]}); "
          f"intervals wholly below 1.0: {sum(hi < 1.0 for hi, _, _ in lows)} of {len(lows)}")


if __name__ == "__main__":
    main()
