"""Which measured input moves a ``validate`` run's predictions (issue 11, item 7).

A prediction takes three measured inputs: the profile (forward, backward per tensor, optimizer),
the semantics (c, gain, factors under compute, d, e) and the cost table. ``validate`` keeps each
twice: as measured in the rounds (R, what the reported prediction uses) and before them (B). This
simulates every variant of one stored run with each of the 8 combinations and prints the pooled
error against the same measured medians (columns: profile, semantics, table).

The run's ``profile.json`` has the rounds' per-tensor times; the profile before the rounds is kept
only as totals, so its per-tensor backward times are the rounds' scaled to its backward total.

Run (from the repo, no cluster needed):
    .venv/bin/python benchmarks/investigations/swap_inputs.py out/bench-m/2000/alexnet
"""

import itertools
import sys
from dataclasses import replace
from pathlib import Path

from commsched.calibrate import load_validate_report
from commsched.cost.cluster import cluster_from_json
from commsched.formats.io import load_profile, plan_from_json
from commsched.planners import DDP
from commsched.sim.events import simulate_run
from commsched.sim.semantics import semantics_from_json
from commsched.sim.timeline import ends_of_plan


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} RUN_DIR (with validate.json and profile.json)")
    root = Path(sys.argv[1])
    report = load_validate_report(root / "validate.json")
    rounds = load_profile(root / "profile.json")
    before = report["profile_before_run"]
    scale = before["backward_s"] / report["profile"]["backward_s"]
    profiles = {
        "R": rounds,
        "B": replace(
            rounds,
            forward_s=before["forward_s"],
            optimizer_s=before["optimizer_s"],
            tensors=tuple(replace(t, backward_s=t.backward_s * scale) for t in rounds.tensors),
        ),
    }
    semantics = {"R": semantics_from_json(report["semantics"]), "B": semantics_from_json(report["semantics_before_run"])}
    tables = {"R": cluster_from_json(report["cluster_in_rounds"]).allreduce, "B": cluster_from_json(report["cluster"]).allreduce}
    combos = list(itertools.product("RB", repeat=3))
    print(f"{report['model']}: pooled error with profile / semantics / table from the rounds (R) or before them (B)")
    print(f"{'variant':22s}" + " ".join(f"{''.join(c):>7s}" for c in combos))
    rows = {**report["strategies"], "stock DDP (defaults)": report["stock_ddp"]}
    # the buckets depend only on the tensors' order and bytes, the same in both profiles
    ends_of = {name: ends_of_plan(rounds, plan_from_json(doc, where=name)) for name, doc in report["plans"].items()}
    ends_of["stock DDP (defaults)"] = DDP().ends(rounds, tables["R"])  # as validate: stock DDP's own buckets
    for name, row in rows.items():
        cells = []
        for p, s, t in combos:
            predicted = simulate_run(profiles[p], ends_of[name], tables[t], semantics[s]).iteration_s
            cells.append(f"{predicted / row['measured_s'] - 1:+7.1%}")
        print(f"{name:22s}" + " ".join(cells))


if __name__ == "__main__":
    main()
