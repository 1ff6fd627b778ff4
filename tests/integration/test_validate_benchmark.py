"""benchmarks/validate_emulated.py's tables from the stored runs (benchmarks/data/validate/R/M): every
stored run prints, with this code, the rows and the summary that BENCHMARKS.md shows for it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks" / "data" / "validate"
RUNS = sorted((d.parent.name, d.name) for d in STORED.glob("*/*") if (d / "validate.json").exists())


def test_there_are_stored_runs_at_both_rates():
    assert {rate for rate, _ in RUNS} == {"500", "2000"} and len(RUNS) >= 5


@pytest.mark.parametrize(("rate", "model"), RUNS)
def test_a_stored_run_prints_what_benchmarks_md_shows(rate, model):
    r = subprocess.run(
        [sys.executable, "benchmarks/validate_emulated.py", "--report-only", "--out", str(STORED), "--rate-mbit", rate, "--models", model],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    bench = (ROOT / "BENCHMARKS.md").read_text()
    rows = [line for line in r.stdout.splitlines() if line.startswith(f"| {model} |")]
    assert len(rows) >= 2 and all(row in bench for row in rows), "a row of the stored run is not in BENCHMARKS.md's tables"
    # the summary row of section 5: the run's median and worst error, and paired in time
    m = re.search(r"median (\S+), worst (\S+); paired in time: median (\S+), worst (\S+) ", r.stdout)
    median, worst, p_median, p_worst = (s.rstrip(";") for s in m.groups())
    summary = [line for line in bench.splitlines() if line.startswith(f"| {model} ") and f"benchmarks/data/validate/{rate}/{model}" in line]
    assert summary, f"no summary row for {model} at {rate} Mbit/s citing its stored run"
    assert any(f"| {median} | {worst}" in s and f"| {p_median}, {p_worst} |" in s for s in summary), (median, worst, p_median, p_worst)


def test_the_pair_kept_against_per_turn_prints_what_benchmarks_md_says():
    """Section 5's back-to-back pair: every variant's DDP kept for the run, then made for each turn."""
    bench = " ".join((ROOT / "BENCHMARKS.md").read_text().split())
    said = []
    for tree in ("0e09364-kept", "f511028-per-turn"):
        r = subprocess.run(
            [sys.executable, "benchmarks/validate_emulated.py", "--report-only", "--out", f"benchmarks/data/validate-ab/{tree}", "--models", "efficientnet_b0"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        said.append(re.search(r"median (\S+), worst (\S+); paired in time: median (\S+), worst (\S+) ", r.stdout).groups())
    (km, kw, kpm, kpw), (tm, tw, tpm, tpw) = [[x.rstrip(";") for x in g] for g in said]
    assert f"{km} / {kw} (`optimal`) kept, {tm} / {tw} (`wfbp`) per turn" in bench
    assert f"paired in time {kpm} / {kpw} and {tpm} / {tpw}" in bench
