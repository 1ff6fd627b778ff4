"""The HTML report page without a browser: self-contained, escaped, strict JSON that round-trips,
inputs read back from what plan/scale/validate write, and one-line errors for bad inputs."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from commsched.cli.main import main
from commsched.planners.compare import compare
from commsched.errors import CommschedError
from commsched.formats.io import load_cluster, load_profile
from commsched.planners import STRATEGIES, planner
from commsched.report.html import (
    ReportSection,
    check_plan_data,
    embed_json,
    load_sections,
    plan_section,
    read_scale_csv,
    render_html,
    scale_section,
    validate_section,
    write_report,
)
from commsched.scale import sweep

DATA = Path(__file__).resolve().parents[1] / "data"
HOSTILE = '</script><script>alert(1)</script><!-- "q" \'s\' & \u00e9 \u2028 /*JS*/ /*DATA*/'


def _cmp(first_name: str | None = None):
    prof = load_profile(DATA / "tiny-profile.json")
    if first_name is not None:
        prof = replace(prof, tensors=(replace(prof.tensors[0], name=first_name), *prof.tensors[1:]))
    return compare(prof, load_cluster(DATA / "tiny-cluster.json"), [planner(n) for n in STRATEGIES])


def _embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_page_is_self_contained():
    page = render_html([plan_section(_cmp()), validate_section(json.loads((DATA / "validate-report.json").read_text()))])
    # nothing that a browser would fetch: no src/href to anywhere, no stylesheet link, no CSS import or url()
    assert not re.search(r"""\b(src|href)\s*=""", page, re.I)
    assert not re.search(r"<link\b|@import|url\(", page, re.I)
    assert re.findall(r"https?://\S+", page) == ['http://www.w3.org/2000/svg";']  # the SVG namespace name, never fetched
    assert page.count("<script") == 2  # the data and the inline renderer; no <script src=...>


def test_hostile_tensor_name_is_escaped_and_round_trips():
    cmp = _cmp(HOSTILE)
    section = plan_section(cmp)
    page = render_html([section])
    # the name cannot close the data's <script> element nor open a comment: <, > and & are \u escapes
    assert page.count("</script>") == 2 and "<!--" not in page and "alert(1)" in page
    data = _embedded(page)["sections"][0]
    assert data["tensors"][0]["name"] == HOSTILE
    # and the one-pass template substitution left the data alone ("/*JS*/" in a name is not replaced)
    assert data == json.loads(json.dumps({"source": section.source, **section.data}))
    assert page.isascii()


def test_embedded_json_round_trips_every_section(tmp_path):
    from commsched.cost.cluster import preset

    rows = sweep({"tiny": load_profile(DATA / "tiny-profile.json")}, preset("k80-10gbe"), [4, 8], [planner("ddp"), planner("optimal")])
    sections = [plan_section(_cmp()), scale_section(rows), validate_section(json.loads((DATA / "validate-report.json").read_text()))]
    doc = _embedded(render_html(sections))
    assert [s["kind"] for s in doc["sections"]] == ["plan", "scale", "validate"]
    for got, s in zip(doc["sections"], sections):
        assert got == {"source": s.source, **s.data}
    assert doc["sections"][1]["rows"] == rows


def test_plan_section_links_each_allreduce_to_its_bucket():
    cmp = _cmp()
    data = plan_section(cmp).data
    names = [t["name"] for t in data["tensors"]]
    shown = [t["strategy"] for t in data["timelines"]]
    assert shown == list(dict.fromkeys([cmp.recommended.strategy, cmp.best, "ddp"])) and cmp.best != "ddp"
    assert data["recommended"] == {"strategy": cmp.recommended.strategy, "reason": cmp.recommended.reason}
    for tl in data["timelines"]:
        plan = cmp.results[tl["strategy"]].plan
        ars = [s for s in tl["spans"] if s["kind"] == "allreduce"]
        assert [s["bucket"] for s in ars] == list(range(len(plan.buckets)))
        assert [s["bytes"] for s in ars] == [b.bytes for b in plan.buckets]
    for s in data["strategies"]:
        plan = cmp.results[s["name"]].plan
        assert [[names[i] for i in b["tensors"]] for b in s["buckets"]] == [list(b.tensors) for b in plan.buckets]
    assert [s["name"] for s in data["strategies"]] == sorted(cmp.results, key=lambda k: cmp.results[k].timeline.iteration_s)


def test_no_nan_or_infinity_reaches_a_page():
    good = render_html([plan_section(_cmp())])
    assert not re.search(r"\bNaN\b|Infinity", good.split('id="report-data">')[1].split("</script>")[0])
    bad = ReportSection("scale", {"kind": "scale", "title": "t", "rows": [{"speedup": float("nan")}]})
    with pytest.raises(CommschedError, match="non-finite"):
        render_html([bad])
    with pytest.raises(CommschedError, match="non-finite"):
        embed_json({"x": [float("inf")]})


def test_plan_data_from_file_is_checked(tmp_path):
    data = json.loads(json.dumps(plan_section(_cmp()).data))
    assert check_plan_data(data, "r.json") == data
    bad = json.loads(json.dumps(data))
    bad["strategies"][1]["iteration_s"] = float("nan")
    with pytest.raises(CommschedError, match=r"r.json: strategies\[1\]: iteration_s must be a finite number, got nan"):
        check_plan_data(bad, "r.json")
    bad = json.loads(json.dumps(data))
    bad["strategies"][0]["buckets"][0]["tensors"] = [99]
    with pytest.raises(CommschedError, match=r"tensor index must be in \[0, 9\), got 99"):
        check_plan_data(bad, "r.json")
    bad = json.loads(json.dumps(data))
    bad["timelines"][0]["spans"][0]["kind"] = "nap"
    with pytest.raises(CommschedError, match="kind must be forward, backward, optimizer or allreduce, got 'nap'"):
        check_plan_data(bad, "r.json")
    for key in ("cluster", "batch_size", "runtime"):  # what the renderer reads, or the page could not draw
        bad = {k: v for k, v in data.items() if k != key}
        with pytest.raises(CommschedError, match=f"r.json: {key} must be"):
            check_plan_data(bad, "r.json")
    (tmp_path / "report-data.json").write_text(json.dumps(data).replace('"iteration_s":', '"iteration_s": NaN, "x":', 1))
    with pytest.raises(CommschedError, match="iteration_s must be a finite number, got nan"):
        load_sections(tmp_path)


def test_scale_csv_with_a_bad_number_names_line_and_column(tmp_path):
    f = tmp_path / "scale.csv"
    f.write_text("model,algorithm,strategy,workers,iteration_s,scaling_factor,speedup\nm,ring,ddp,4,0.1,0.9,3.6\nm,ring,ddp,8,0.1,nan,3.6\n")
    with pytest.raises(CommschedError, match=r"scale.csv line 3: scaling_factor must be a finite number, got 'nan'"):
        read_scale_csv(f)
    f.write_text("model,strategy\nm,ddp\n")
    with pytest.raises(CommschedError, match="missing column 'algorithm'"):
        read_scale_csv(f)


def test_a_scale_csv_saved_by_a_spreadsheet_with_a_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "scale.csv"
    f.write_bytes(b"\xef\xbb\xbfmodel,algorithm,strategy,workers,iteration_s,scaling_factor,speedup\nm,ring,ddp,4,0.1,0.9,3.6\n")
    assert read_scale_csv(f)[0]["model"] == "m"


def test_validate_section_needs_intervals():
    doc = json.loads((DATA / "validate-report.json").read_text())
    data = validate_section(doc).data
    assert set(data["strategies"]) == set(doc["strategies"]) and data["stock_ddp"]["error_ci95"] == doc["stock_ddp"]["error_ci95"]
    doc["strategies"]["optimal"]["error_ci95"] = [0.1]
    with pytest.raises(CommschedError, match=r"strategies\['optimal'\]: error_ci95 must be two finite numbers"):
        validate_section(doc)


def test_report_command_reads_what_plan_and_scale_wrote(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["plan", "--profile", str(DATA / "tiny-profile.json"), "--cluster", str(DATA / "tiny-cluster.json"), "--out", str(out)]) == 0
    written = (out / "report.html").read_text()
    assert main(["scale", "--profile", str(DATA / "tiny-profile.json"), "--cluster", "k80-10gbe", "--workers", "4,8", "--out", str(out)]) == 0
    assert (out / "scale-report.html").is_file() and (out / "report.html").read_text() == written  # scale keeps plan's page
    assert main(["report", "--from", str(out), "--out", str(tmp_path / "both.html")]) == 0
    doc = _embedded((tmp_path / "both.html").read_text())
    assert [s["kind"] for s in doc["sections"]] == ["plan", "scale"]
    assert doc["sections"][0] | {"source": ""} == _embedded(written)["sections"][0] | {"source": ""}
    assert len(doc["sections"][1]["rows"]) == 2 * len(STRATEGIES)
    # a single file, and a directory with nothing to report: one line, exit 2
    assert main(["report", "--from", str(out / "scale.csv")]) == 0 and (out / "report.html").read_text() == written
    assert _embedded((out / "scale-report.html").read_text())["sections"][0]["kind"] == "scale"
    capsys.readouterr()
    (tmp_path / "empty").mkdir()
    assert main(["report", "--from", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no report-data.json, scale.csv, validate.json here" in err
    assert main(["report", "--from", str(DATA / "tiny-profile.json")]) == 2
    assert "not a report-data.json, scale.csv or validate.json" in capsys.readouterr().err


def test_write_report_writes_nothing_on_error(tmp_path):
    with pytest.raises(CommschedError):
        write_report(tmp_path / "r.html", [])
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(CommschedError, match="kind must be one of"):
        ReportSection("gantt", {})  # type: ignore[arg-type]


def test_renderer_puts_data_in_as_text_only():
    # names reach the DOM through textContent and attribute values, never parsed as markup
    from commsched.report import html

    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", html._JS)
