"""Launch passes that stalled on the link, left out of the launch fit or not, on stored `validate`
runs (issue 11, item 7): every run's plans predicted again from its raw numbers, with the launch
ratio fitted to the median of the passes that did not stall (:func:`commsched.calibrate.unstalled`,
what ``validate`` does) and to the median of all of them (as before), error against the measured
medians; and which passes the rule left out.

Run (from the repo, no cluster needed; each argument a directory of runs, one folder per model, as
``benchmarks/validate_emulated.py`` writes them):
    .venv/bin/python benchmarks/investigations/stall_check.py out/bench-o/500 out/bench-o/2000
"""

import statistics
import sys
from dataclasses import replace
from pathlib import Path

from launch_ratio_check import load_run

from commsched.calibrate import STALL_SEPARATION, launch_costs, load_validate_report, unstalled
from commsched.sim.events import simulate_run

RULES = {"unstalled": STALL_SEPARATION, "all passes": float("inf")}


def run_errors(root: Path) -> dict[str, tuple[tuple, dict[str, float]]]:
    """Per rule: (the fitted ratio points, {plan: pooled error}) of one stored run."""
    probes, profile, cost, ends, measured, sem, finalize_s = load_run(root)
    out = {}
    for rule, separation in RULES.items():
        e, points = launch_costs(probes, sem, profile, cost, finalize_s, separation=separation)
        fitted = replace(sem, launch_compute_s=e, launch_factor_points=points)
        out[rule] = (points, {n: simulate_run(profile, en, cost, fitted).iteration_s / measured[n] - 1 for n, en in ends.items()})
    return out


def left_out(root: Path) -> list[str]:
    """The passes the rule leaves out, per launch pass, in ms."""
    probes = load_validate_report(root / "validate.json")["raw"]["probes"]
    lines = []
    for key in ("launch_pass", "launch_pass_mid"):
        # each probe sample is gathered from every rank, the same slowest-rank value on each: the
        # rule sees every copy (as launch_costs does), the lines show each pass once
        ends = [p[key][1] for p in probes if p.get(key)]
        kept = set(unstalled(ends))
        if len(kept) < len(set(ends)):
            out = sorted(set(ends) - kept)
            lines.append(f"{key}: kept {' '.join(f'{x * 1e3:.0f}' for x in sorted(kept))} | left out {' '.join(f'{x * 1e3:.0f}' for x in out)}")
    return lines


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(f"usage: {sys.argv[0]} RUNS_DIR [RUNS_DIR ...]")
    pooled: dict[str, dict[str, list[float]]] = {rule: {} for rule in RULES}
    for runs in map(Path, sys.argv[1:]):
        for root in sorted(runs.iterdir()):
            got = run_errors(root)
            print(f"{root}  (columns: {', '.join(RULES)}; ratios {', '.join(str([(b, round(r, 2)) for b, r in got[rule][0]]) for rule in RULES)})")
            for line in left_out(root):
                print(f"   {line}")
            for name in got["unstalled"][1]:
                print(f"   {name:>15} " + " ".join(f"{got[rule][1][name]:+6.1%}" for rule in RULES))
            for rule in RULES:
                pooled[rule].setdefault(runs.name, []).extend(abs(x) for x in got[rule][1].values())
    for rule, by_rate in pooled.items():
        xs = [x for v in by_rate.values() for x in v]
        rates = ", ".join(f"{rate}: median {statistics.median(v):.1%}" for rate, v in by_rate.items())
        print(f"{rule}: median {statistics.median(xs):.1%}, worst {max(xs):.1%}, {sum(x > 0.025 for x in xs)} of {len(xs)} rows over 2.5%, "
              f"{sum(x > 0.05 for x in xs)} over 5% ({rates})")


if __name__ == "__main__":
    main()
