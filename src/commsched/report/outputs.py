"""The files a command writes to its ``--out`` directory: a plan comparison's (``commsched plan``), a
scaling sweep's (``commsched scale``) and a finished validate run's (``commsched validate``).

Everything that can fail on its inputs (a plot's numbers, the HTML page) is checked or rendered
before the first file is written, so a refusal leaves no half-written directory; only the file
system (an unwritable directory, a full disk) can fail a write.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from commsched.errors import CommschedError

if TYPE_CHECKING:
    from commsched.cost.cluster import ClusterSpec
    from commsched.planners.compare import Comparison
    from commsched.scale.markers import Marker
    from commsched.sim.semantics import Semantics
    from commsched.types import ModelProfile, Plan

PLAN_FILES = ("plan.json", "ddp_options.json", "trace.json", "gantt.png", "report-data.json", "report.html")


def write_plan_files(cmp: Comparison, out: str | Path) -> list[Path]:
    """``commsched plan``'s files in ``out``: ``plan.json`` and ``ddp_options.json`` of the recommended
    plan (what to run; with per-bucket resources also ``nccl_tuner_table.txt``), the Chrome trace of
    every strategy (the recommended first), the Gantt chart of the recommended, the fastest and
    default DDP's timelines, ``report-data.json`` (what ``commsched report --from`` renders again)
    and ``report.html``. Returns the files written, in that order (the tuner table after the plan's)."""
    from commsched.formats.io import plan_to_json, write_json
    from commsched.planners.stock_ddp import ddp_options_doc
    from commsched.report.html import plan_section, render_html
    from commsched.report.plots import check_timelines, gantt_png
    from commsched.report.trace import chrome_trace

    out = Path(out)
    rows = cmp.rows
    rec = cmp.recommended.strategy
    shown = {name: rows[name].timeline for name in dict.fromkeys([rec, cmp.best, "ddp"]) if name in rows}
    check_timelines(shown)  # what the plot needs, before any file is written
    section = plan_section(cmp)
    page = render_html([section])  # rendered (and checked for non-finite numbers) before any write
    plan = rows[rec].plan
    write_json(out / "plan.json", plan_to_json(plan))
    write_json(out / "ddp_options.json", ddp_options_doc(plan))  # commsched.ddp_options/v1
    written = [out / "plan.json", out / "ddp_options.json"]
    if any(b.resources is not None for b in plan.buckets):
        from commsched.nccl_tuner import table_from_plan, table_text

        (out / "nccl_tuner_table.txt").write_text(table_text(table_from_plan(plan), f"strategy {plan.strategy}, model {plan.model}"))
        written.append(out / "nccl_tuner_table.txt")
    ordered = {rec: rows[rec].timeline} | {k: r.timeline for k, r in rows.items() if k != rec}
    write_json(out / "trace.json", chrome_trace(ordered))
    p = cmp.profile
    gantt_png(shown, out / "gantt.png", title=f"{p.model} on {cmp.cluster.name} ({cmp.cluster.workers} workers)")
    write_json(out / "report-data.json", section.data)
    (out / "report.html").write_text(page, encoding="utf-8")
    return written + [out / name for name in PLAN_FILES[2:]]


def write_scale_files(rows: Sequence[dict], out: str | Path, title: str) -> tuple[list[dict], list[Marker]]:
    """``commsched scale``'s files in ``out`` (created if missing): ``scale.csv`` (the sweep's rows
    with a 0/1 column per marker, :func:`commsched.scale.mark_rows`: each curve's bend, synceasgd
    overtaking wfbp, optimal's one bucket), ``scale.png`` and ``scale-report.html`` (not
    ``report.html``: scale's default directory is plan's, whose page ``make run`` writes). Returns
    the rows as written and the markers."""
    from commsched.report.html import render_html, scale_section
    from commsched.report.plots import check_scaling_rows, scaling_png
    from commsched.scale.markers import mark_rows

    check_scaling_rows(rows)  # every number finite and plottable, before any file is written
    marked, markers = mark_rows(rows)
    page = render_html([scale_section(marked, title=title)])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scale.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(marked[0]))
        w.writeheader()
        w.writerows(marked)
    scaling_png(marked, out / "scale.png", title=title, markers=markers)
    (out / "scale-report.html").write_text(page, encoding="utf-8")
    return marked, markers


def write_validate_files(
    report: dict, records: list, profile: ModelProfile, plan: Plan, cluster: ClusterSpec, semantics: Semantics, out: Path
) -> None:
    """Everything a finished validate run writes to ``out``: ``validate.json``, ``validate.png``,
    ``validate-report.html``, the measured profile, cluster and semantics (what plans this job again),
    and with ``records`` (the fastest variant's recorded steps) its measured and predicted timeline
    (``measured-trace.json``, ``measured-gantt.png``). The page is worth less than the run: when it
    cannot be rendered, a note says so and the rest stands."""
    from commsched.calibrate.report import write_atomic
    from commsched.formats.io import profile_to_json, write_json
    from commsched.report.html import validate_section, write_report
    from commsched.report.plots import gantt_png, validation_png
    from commsched.report.trace import chrome_trace
    from commsched.sim.events import simulate_run
    from commsched.sim.timeline import ends_of_plan

    out.mkdir(parents=True, exist_ok=True)
    if records:
        rec = records[-1]
        report["measured_breakdown"] = rec.breakdown()
        predicted = simulate_run(profile, ends_of_plan(profile, plan), cluster.allreduce, semantics)
        timelines = {f"{plan.strategy} measured": rec.timeline(), f"{plan.strategy} predicted": predicted}
        write_json(out / "measured-trace.json", chrome_trace(timelines, "measured"))
        gantt_png(timelines, out / "measured-gantt.png", title=f"{report['model']}: measured vs predicted step ({plan.strategy}, stock DDP)")
    write_json(out / "profile.json", profile_to_json(profile))
    # what a user needs to plan this job again: `commsched plan --profile profile.json --cluster
    # cluster.json --runtime semantics.json`
    write_json(out / "cluster.json", cluster.to_json())
    write_json(out / "semantics.json", semantics.to_json())
    write_atomic(out / "validate.json", report)
    validation_png(report, out / "validate.png")
    try:
        write_report(out / "validate-report.html", [validate_section(report, str(out / "validate.json"))])
    except CommschedError as e:  # the measurements are written; a page is not worth the run
        import sys

        print(f"note: validate-report.html not written: {e}", file=sys.stderr)


__all__ = ["PLAN_FILES", "write_plan_files", "write_scale_files", "write_validate_files"]
