"""One self-contained HTML page of a ``plan`` comparison, a ``scale`` sweep or a ``validate`` run.

The page needs no network when opened: the data is JSON in a ``<script type="application/json">``
tag and a small hand-written renderer (vanilla JS drawing SVG, below) is inline; no library, no CDN,
no font or image fetched. Everything from a user's files (model, tensor, strategy and cluster names)
reaches the page only inside that JSON, with ``<``, ``>`` and ``&`` written as ``\\u003c`` etc., and
the renderer puts it into the DOM as text (``textContent``, attribute values), never as markup, so
a tensor called ``</script><script>...`` is shown as itself. The JSON goes through
:func:`commsched.formats.io.dumps`, which refuses NaN and Infinity: no such token reaches a page.

Inputs (each a :class:`ReportSection`):

- ``plan``: :func:`plan_section` of a :class:`~commsched.planners.compare.Comparison`; ``plan --out`` writes it
  as ``report-data.json`` (``commsched.report-data/v1``, kind ``plan``), which ``report`` reads back,
  since plan.json and trace.json alone lack the per-strategy table and bucket layouts.
- ``scale``: the rows of ``scale.csv`` (:func:`scale_section`).
- ``validate``: ``validate.json`` as ``validate`` writes it (:func:`validate_section`).

Test hooks, stable: every section is ``<section id="plan|scale|validate">``; its table is
``table.strategies`` with one ``tr[data-strategy]`` per strategy (scale: per model, algorithm and
strategy series; validate: stock DDP's reference row has ``data-reference`` instead). The plan
section draws one ``.allreduce`` element per all-reduce **of each shown timeline** (the recommended
plan's, then the fastest plan's and default DDP's where they are other strategies), inside
``g.timeline[data-strategy]``, so the page holds the sum of their bucket counts; the row of the
recommended strategy has class ``best``; the bucket layout has one ``.bucket`` per bucket of
every strategy. Hover text is each element's ``data-tip``, shown in ``#tooltip``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from commsched.errors import CommschedError
from commsched.scale.markers import MARKER_COLUMNS
from commsched.types import shown

if TYPE_CHECKING:
    from commsched.planners.compare import Comparison

SCHEMA = "commsched.report-data/v1"
ReportKind = Literal["plan", "scale", "validate"]
KINDS: tuple[ReportKind, ...] = ("plan", "scale", "validate")
# what a directory may hold, per kind: the file `report --from DIR` reads
INPUT_FILES: dict[ReportKind, str] = {"plan": "report-data.json", "scale": "scale.csv", "validate": "validate.json"}
MAX_TIP_TENSORS = 20  # tensor names listed in one hover text; a 600-tensor bucket says "... and N more"


@dataclass(frozen=True)
class ReportSection:
    """One part of a page: its kind, its JSON-ready data (finite numbers only) and where it came from."""

    kind: ReportKind
    data: dict
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CommschedError(f"report section kind must be one of {', '.join(KINDS)}, got {shown(self.kind)}")


# --- checks on data read back from files --------------------------------------------------------


def _num(doc: Mapping, key: str, where: str, *, nullable: bool = False) -> float | None:
    v = doc.get(key) if isinstance(doc, Mapping) else None
    if v is None and nullable and isinstance(doc, Mapping):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise CommschedError(f"{where}: {key} must be a finite number, got {shown(v)}")
    return v


def _int(doc: Mapping, key: str, where: str, lo: int = 0) -> int:
    v = doc.get(key) if isinstance(doc, Mapping) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise CommschedError(f"{where}: {key} must be an integer >= {lo}, got {shown(v)}")
    return v


def _str(doc: Mapping, key: str, where: str) -> str:
    v = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(v, str):
        raise CommschedError(f"{where}: {key} must be a string, got {shown(v)}")
    return v


def _list(doc: Mapping, key: str, where: str, *, nonempty: bool = True) -> list:
    v = doc.get(key) if isinstance(doc, Mapping) else None
    if not isinstance(v, list) or (nonempty and not v):
        raise CommschedError(f"{where}: {key} must be a{' non-empty' if nonempty else ''} list, got {shown(v)}")
    return v


def _interval(doc: Mapping, key: str, where: str) -> list[float]:
    v = doc.get(key)
    if not (isinstance(v, list) and len(v) == 2 and all(not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) for x in v)):
        raise CommschedError(f"{where}: {key} must be two finite numbers [low, high], got {shown(v)}")
    return [float(v[0]), float(v[1])]


# --- plan ---------------------------------------------------------------------------------------


def plan_section(cmp: Comparison) -> ReportSection:
    """The table (every strategy), the recommended, fastest and default DDP's timelines, every bucket layout."""
    p, c = cmp.profile, cmp.cluster
    index = {t.name: i for i, t in enumerate(p.tensors)}
    best = cmp.best
    rec = cmp.recommended
    rows = cmp.rows
    ordered = sorted(rows.items(), key=lambda kv: kv[1].timeline.iteration_s)
    strategies = []
    for name, r in ordered:
        tl = r.timeline
        strategies.append(
            {
                "name": name,
                "iteration_s": tl.iteration_s,
                "compute_s": tl.compute_s,
                "comm_s": tl.comm_s,
                "non_overlapped_comm_s": tl.non_overlapped_comm_s,
                "scaling_factor": r.scaling_factor,
                "speedup_vs_ddp": r.speedup_vs_ddp,
                # tensors as indexes into the profile's list: the page stays small for 20,000 tensors
                "buckets": [{"tensors": [index[n] for n in b.tensors], "bytes": b.bytes, "resources": b.resources} for b in r.plan.buckets],
            }
        )
    shown_names = list(dict.fromkeys([rec.strategy, best] + (["ddp"] if "ddp" in rows else [])))
    timelines = []
    for name in shown_names:
        tl = rows[name].timeline
        n_buckets = len(rows[name].plan.buckets)
        spans, j = [], 0
        for s in tl.spans:
            span = {"kind": s.kind, "name": s.name, "start_s": s.start_s, "end_s": s.end_s}
            if s.kind == "allreduce":
                # the simulators emit all-reduce j for bucket j, in bucket order
                span |= {"bytes": s.bytes, "bucket": j if j < n_buckets else None}
                j += 1
            spans.append(span)
        timelines.append({"strategy": name, "iteration_s": tl.iteration_s, "spans": spans})
    sem = cmp.semantics
    data = {
        "schema": SCHEMA,
        "kind": "plan",
        "title": f"{p.model} on {c.name} ({c.workers} workers)",
        "model": p.model,
        "batch_size": p.batch_size,
        "device": p.device,
        "profile_source": p.source,
        "optimizer_s": p.optimizer_s,
        "cluster": {"name": c.name, "workers": c.workers, "allreduce": getattr(c.allreduce, "algorithm", None) or c.allreduce.to_json()["model"]},
        "runtime": sem.backend if sem.threads == 1 else f"{sem.backend} ({sem.threads} threads)",
        "best": best,
        "recommended": {"strategy": rec.strategy, "reason": rec.reason},
        "tensors": [{"name": t.name, "bytes": t.bytes, "ready_s": r} for t, r in zip(p.tensors, p.ready_s)],
        "strategies": strategies,
        "timelines": timelines,
    }
    return ReportSection("plan", data, "report-data.json")


def check_plan_data(doc: object, where: str) -> dict:
    """A ``report-data.json`` of kind plan as the renderer needs it; the first bad value is an error."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CommschedError(f"{where}: not a {SCHEMA} document (schema {shown(doc.get('schema') if isinstance(doc, dict) else doc)})")
    if doc.get("kind") != "plan":
        raise CommschedError(f"{where}: kind must be 'plan', got {shown(doc.get('kind'))}")
    for key in ("title", "model", "best", "device", "profile_source", "runtime"):
        _str(doc, key, where)
    _int(doc, "batch_size", where, 1)
    _num(doc, "optimizer_s", where, nullable=True)  # absent in pages written before it was shown
    cluster = doc.get("cluster")
    if not isinstance(cluster, dict):
        raise CommschedError(f"{where}: cluster must be an object, got {shown(cluster)}")
    _str(cluster, "name", f"{where}: cluster"), _str(cluster, "allreduce", f"{where}: cluster"), _int(cluster, "workers", f"{where}: cluster", 1)
    tensors = _list(doc, "tensors", where)
    for i, t in enumerate(tensors):
        w = f"{where}: tensors[{i}]"
        _str(t, "name", w), _int(t, "bytes", w), _num(t, "ready_s", w)
    names = set()
    for i, s in enumerate(_list(doc, "strategies", where)):
        w = f"{where}: strategies[{i}]"
        names.add(_str(s, "name", w))
        for key in ("iteration_s", "compute_s", "comm_s", "non_overlapped_comm_s", "scaling_factor", "speedup_vs_ddp"):
            _num(s, key, w)
        for j, b in enumerate(_list(s, "buckets", w)):
            wb = f"{w}.buckets[{j}]"
            _int(b, "bytes", wb)
            for k in _list(b, "tensors", wb):
                if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < len(tensors):
                    raise CommschedError(f"{wb}: tensor index must be in [0, {len(tensors)}), got {shown(k)}")
            if b.get("resources") is not None and not isinstance(b["resources"], dict):
                raise CommschedError(f"{wb}: resources must be an object or null, got {shown(b['resources'])}")
    if doc["best"] not in names:
        raise CommschedError(f"{where}: best {shown(doc['best'])} is not one of the strategies")
    rec = doc.get("recommended")  # absent in pages written before the recommendation existed
    if rec is not None:
        if not isinstance(rec, dict):
            raise CommschedError(f"{where}: recommended must be an object, got {shown(rec)}")
        if _str(rec, "strategy", f"{where}: recommended") not in names:
            raise CommschedError(f"{where}: recommended {shown(rec['strategy'])} is not one of the strategies")
        _str(rec, "reason", f"{where}: recommended")
    for i, tl in enumerate(_list(doc, "timelines", where)):
        w = f"{where}: timelines[{i}]"
        if _str(tl, "strategy", w) not in names:
            raise CommschedError(f"{w}: strategy {shown(tl['strategy'])} is not one of the strategies")
        _num(tl, "iteration_s", w)
        for j, s in enumerate(_list(tl, "spans", w)):
            ws = f"{w}.spans[{j}]"
            kind = s.get("kind") if isinstance(s, dict) else s
            if kind not in ("forward", "backward", "optimizer", "allreduce"):
                raise CommschedError(f"{ws}: kind must be forward, backward, optimizer or allreduce, got {shown(kind)}")
            _str(s, "name", ws), _num(s, "start_s", ws), _num(s, "end_s", ws)
            if s["kind"] == "allreduce":
                _int(s, "bytes", ws)
                if s.get("bucket") is not None:
                    _int(s, "bucket", ws)
    return doc


# --- scale --------------------------------------------------------------------------------------

_SCALE_NUMBERS = ("iteration_s", "compute_s", "non_overlapped_comm_s", "scaling_factor", "speedup")


def scale_section(rows: Sequence[Mapping], title: str = "predicted scaling", source: str = "scale.csv") -> ReportSection:
    """Scaling curves per (model, algorithm), one line per strategy, from :func:`commsched.scale.sweep` rows."""
    if not rows:
        raise CommschedError(f"{source}: no rows to report")
    out = []
    for i, r in enumerate(rows):
        w = f"{source} row {i + 1}"
        row = {k: _str(r, k, w) for k in ("model", "algorithm", "strategy")}
        row["workers"] = _int(r, "workers", w, lo=1)
        row |= {k: _num(r, k, w) for k in _SCALE_NUMBERS if k in r}
        for k in ("iteration_s", "scaling_factor", "speedup"):
            if k not in row or not row[k] > 0:
                raise CommschedError(f"{w}: {k} must be a finite number > 0, got {shown(r.get(k))}")
        if "buckets" in r:
            row["buckets"] = _int(r, "buckets", w, lo=1)
        for k in MARKER_COLUMNS:  # scale's markers, 1 on the marked point
            if k in r:
                row[k] = _int(r, k, w)
        out.append(row)
    return ReportSection("scale", {"schema": SCHEMA, "kind": "scale", "title": title, "rows": out}, source)


def read_scale_csv(path: str | Path) -> list[dict]:
    """The rows of a ``scale.csv``: worker and bucket counts as ints, the rest of the numbers as floats."""
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8-sig") as fh:  # a byte-order mark (spreadsheets write one) too
            reader = csv.DictReader(fh)
            rows = list(reader)
            fields = reader.fieldnames or []
    except FileNotFoundError:
        raise CommschedError(f"{p}: no such file") from None
    except UnicodeDecodeError as e:
        raise CommschedError(f"{p}: not UTF-8 text (byte {e.start}); expected a CSV file") from None
    except csv.Error as e:
        raise CommschedError(f"{p}: malformed CSV: {e}") from None
    missing = [k for k in ("model", "algorithm", "strategy", "workers", "iteration_s", "scaling_factor", "speedup") if k not in fields]
    if missing:
        raise CommschedError(f"{p}: not a scale.csv: missing column {missing[0]!r}")
    out = []
    for line, r in enumerate(rows, start=2):
        row: dict = {k: r[k] for k in ("model", "algorithm", "strategy")}
        for k, v in r.items():
            if k in ("workers", "buckets", *MARKER_COLUMNS):
                try:
                    row[k] = int(v)
                except (TypeError, ValueError):
                    raise CommschedError(f"{p} line {line}: {k} must be an integer, got {shown(v)}") from None
            elif k in _SCALE_NUMBERS:
                try:
                    row[k] = float(v)
                except (TypeError, ValueError):
                    raise CommschedError(f"{p} line {line}: {k} must be a number, got {shown(v)}") from None
                if not math.isfinite(row[k]):
                    raise CommschedError(f"{p} line {line}: {k} must be a finite number, got {shown(v)}")
        out.append(row)
    return out


# --- validate -----------------------------------------------------------------------------------

_VALIDATE_ROW = ("iteration_s", "measured_s", "measured_min_s", "measured_max_s", "error")


def _validate_row(r: object, where: str) -> dict:
    if not isinstance(r, dict):
        raise CommschedError(f"{where} must be an object, got {shown(r)}")
    row: dict = {"buckets": _int(r, "buckets", where, lo=1)}
    row |= {k: _num(r, k, where) for k in _VALIDATE_ROW}
    row["error_ci95"] = _interval(r, "error_ci95", where)
    row["speedup_vs_stock_ddp"] = _num(r, "speedup_vs_stock_ddp", where)
    row["speedup_ci95"] = _interval(r, "speedup_ci95", where)
    for k in ("no_contention_s", "error_before_run", "predicted_before_run_s"):
        row[k] = _num(r, k, where, nullable=True)
    return row


def validate_section(report: object, source: str = "validate.json") -> ReportSection:
    """Predicted vs measured per strategy, with the measured range and the error's 95% interval."""
    if not isinstance(report, dict) or not isinstance(report.get("strategies"), dict) or "stock_ddp" not in report:
        raise CommschedError(f"{source}: not a validate.json (needs 'strategies' and 'stock_ddp')")
    if not report["strategies"]:
        raise CommschedError(f"{source}: strategies is empty")
    strategies = {}
    for name, r in report["strategies"].items():
        strategies[name] = _validate_row(r, f"{source}: strategies[{name!r}]")
    data = {
        "schema": SCHEMA,
        "kind": "validate",
        "title": f"{_str(report, 'model', source)}: predicted vs measured",
        "model": report["model"],
        "batch_size": _int(report, "batch_size", source, lo=1),
        "world_size": _int(report, "world_size", source, lo=1),
        "backend": _str(report, "backend", source),
        "rounds": _int(report, "rounds", source, lo=1),
        "steps_per_round": _int(report, "steps_per_round", source, lo=1),
        "best_measured": report.get("best_measured") if isinstance(report.get("best_measured"), str) else None,
        "strategies": strategies,
        "stock_ddp": _validate_row(report["stock_ddp"], f"{source}: stock_ddp"),
    }
    return ReportSection("validate", data, source)


# --- reading what the commands wrote ------------------------------------------------------------


def load_sections(path: str | Path) -> list[ReportSection]:
    """A directory: every input it holds (report-data.json, scale.csv, validate.json), in that order.
    A file: that one input."""
    from commsched.formats.io import read_json

    p = Path(path)
    if p.is_dir():
        found = [(kind, p / name) for kind, name in INPUT_FILES.items() if (p / name).is_file()]
        if not found:
            raise CommschedError(
                f"{p}: no {', '.join(INPUT_FILES.values())} here (written by plan --out, scale --out, validate --out)"
            )
        return [_load(kind, f, read_json) for kind, f in found]
    if not p.exists():
        raise CommschedError(f"{p}: no such file or directory")
    if p.suffix.lower() == ".csv":
        return [_load("scale", p, read_json)]
    doc = read_json(p)
    if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
        return [_load("plan", p, lambda _: doc)]
    from commsched.calibrate.report import is_validate_report

    if is_validate_report(doc):
        return [_load("validate", p, read_json)]
    raise CommschedError(f"{p}: not a report-data.json, scale.csv or validate.json")


def _load(kind: ReportKind, f: Path, read_json) -> ReportSection:
    if kind == "plan":
        return ReportSection("plan", check_plan_data(read_json(f), str(f)), str(f))
    if kind == "scale":
        return scale_section(read_scale_csv(f), title=f"predicted scaling ({f.name})", source=str(f))
    from commsched.calibrate.report import load_validate_report  # the one reader of validate.json

    return validate_section(load_validate_report(f), str(f))


# --- the page -----------------------------------------------------------------------------------


def embed_json(doc: object, what: str = "report") -> str:
    """JSON safe inside a <script> element: strict (no NaN/Infinity) and ASCII, with ``<``, ``>`` and ``&``
    escaped so that no ``</script>`` or ``<!--`` can close or change the element; U+2028/9 arrive
    escaped by ``ensure_ascii``."""
    from commsched.formats.io import dumps

    text = dumps(doc, what, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(sections: Sequence[ReportSection]) -> str:
    """The page: the static template, the sections' data as embedded JSON, the inline renderer."""
    if not sections:
        raise CommschedError("a report needs at least one section")
    kinds = [s.kind for s in sections]
    if len(set(kinds)) != len(kinds):
        raise CommschedError(f"a report holds each kind once, got {', '.join(kinds)}")
    payload = {"schema": SCHEMA, "sections": [{"source": s.source, **s.data, "kind": s.kind} for s in sections]}
    parts = {"CSS": _CSS, "DATA": embed_json(payload), "JS": _JS}
    # one pass over the template: a name containing "/*JS*/" in the data is never substituted again
    return re.sub(r"/\*(CSS|DATA|JS)\*/", lambda m: parts[m.group(1)], _PAGE)


def write_report(path: str | Path, sections: Sequence[ReportSection]) -> Path:
    """Renders first, then writes: a failure leaves no half-written page."""
    text = render_html(sections)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>commsched report</title>
<style>/*CSS*/</style>
</head>
<body>
<header><h1 id="title">commsched report</h1><p id="sources"></p></header>
<main id="report"></main>
<div id="tooltip" role="tooltip" hidden></div>
<script type="application/json" id="report-data">/*DATA*/</script>
<script>/*JS*/</script>
</body>
</html>
"""

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em 2em;color:#222;background:#fff}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .3em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:1em 0 .3em}#sources,.note{color:#666;font-size:.9em}
table.strategies{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:.5em 0}
table.strategies th,table.strategies td{padding:.2em .7em;border-bottom:1px solid #eee;text-align:right}
table.strategies th.name,table.strategies td.name{text-align:left}
table.strategies tr.best td{font-weight:bold;background:#fff7e6}
table.strategies tr.reference td{color:#555;font-style:italic}
svg{width:100%;max-width:1100px;height:auto;display:block;margin:.3em 0}
svg text{font-size:11px;fill:#333}svg .axis line,svg .axis path{stroke:#999}svg .axis line.grid{stroke:#eee}
.allreduce,.bucket,.point,.measured,.predicted,.interval{cursor:default}
.allreduce:hover,.bucket:hover,.point:hover{stroke:#000;stroke-width:1}
#tooltip{position:fixed;z-index:10;max-width:34em;background:#222;color:#fff;padding:.4em .6em;border-radius:4px;
font-size:12px;white-space:pre-wrap;pointer-events:none}
.legend span{display:inline-block;margin-right:1.2em;font-size:.9em}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.error{color:#b00;font-weight:bold}
"""

# The renderer. Data enters the DOM only as text nodes and attribute values (never innerHTML).
_JS = r"""
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";  // a namespace name, not fetched
  var PALETTE = ["#e6550d", "#3182bd", "#31a354", "#756bb1", "#636363", "#d6616b", "#8c6d31", "#17becf", "#bcbd22", "#e377c2", "#7f7f7f", "#9467bd"];
  var KIND_COLORS = {forward: "#9ecae1", backward: "#3182bd", optimizer: "#756bb1"};
  var COMM = ["#e6550d", "#fdae6b"];
  var tip = document.getElementById("tooltip");

  function el(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function svgEl(tag, attrs, parent, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function ms(s) { return (s * 1e3).toFixed(2); }
  function pct(x) { return (x >= 0 ? "+" : "") + (x * 100).toFixed(1) + "%"; }
  function bytesText(b) {
    var mib = b / 1048576;
    return b + " bytes (" + (mib >= 0.01 ? mib.toFixed(2) + " MiB" : (b / 1024).toFixed(2) + " KiB") + ")";
  }
  function niceTicks(lo, hi, n) {
    var span = hi - lo; if (!(span > 0)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10(span / n))), err = span / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  function hoverable(e, text) { e.setAttribute("data-tip", text); e.setAttribute("aria-label", text); return e; }
  document.addEventListener("mousemove", function (ev) {
    var t = ev.target && ev.target.closest ? ev.target.closest("[data-tip]") : null;
    if (!t) { tip.hidden = true; return; }
    tip.textContent = t.getAttribute("data-tip");
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - r.width - 14);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - r.height - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  });
  function table(parent, headers, ntext) {  // the first ntext columns are names (left), the rest numbers
    var t = el("table", {"class": "strategies"}, parent);
    var tr = el("tr", {}, el("thead", {}, t));
    headers.forEach(function (h, i) { el("th", {"class": i < (ntext || 1) ? "name" : null}, tr, h); });
    return el("tbody", {}, t);
  }
  function row(tbody, cells, attrs, ntext) {
    var tr = el("tr", attrs || {}, tbody);
    cells.forEach(function (c, i) { el("td", {"class": i < (ntext || 1) ? "name" : null}, tr, String(c)); });
    return tr;
  }
  function legend(parent, items) {
    var d = el("div", {"class": "legend"}, parent);
    items.forEach(function (it) { var s = el("span", {}, d); el("i", {style: "background:" + it[1]}, s); s.appendChild(document.createTextNode(it[0])); });
  }

  // ---- plan ---------------------------------------------------------------------------------
  function bucketTip(d, strategy, j, b) {
    var names = b.tensors.slice(0, MAX_TIP).map(function (i) { return d.tensors[i].name; });
    var more = b.tensors.length > MAX_TIP ? "\n... and " + (b.tensors.length - MAX_TIP) + " more" : "";
    return strategy + ", bucket " + j + ": " + bytesText(b.bytes) + "\n" + b.tensors.length + " tensor(s): " +
      names.join(", ") + more + "\nresources: " + (b.resources ? JSON.stringify(b.resources) : "the library's default");
  }
  function renderPlan(sec, d) {
    var byName = {};
    d.strategies.forEach(function (s) { byName[s.name] = s; });
    el("h2", {}, sec, d.title);
    el("p", {"class": "note"}, sec, "batch " + d.batch_size + " per worker" + (d.device ? " on " + d.device : "") + " (" + d.profile_source + " profile), " +
      d.cluster.workers + " workers, all-reduce " + d.cluster.allreduce + ", runtime " + d.runtime + "; predicted, per iteration. Fastest: " + d.best + "." +
      (d.recommended ? " Recommended (what to run): " + d.recommended.strategy + ", " + d.recommended.reason + "." : ""));
    el("h3", {}, sec, "Strategies");
    var opt = d.optimizer_s > 0;  // a measured update: the columns then add up to the iteration
    var tb = table(sec, ["strategy", "iteration ms", "compute ms", "non-overlapped comm ms"].concat(opt ? ["optimizer ms"] : [],
      ["scaling factor", "buckets", "speedup vs DDP"]));
    d.strategies.forEach(function (s) {
      row(tb, [s.name, ms(s.iteration_s), ms(s.compute_s), ms(s.non_overlapped_comm_s)].concat(opt ? [ms(d.optimizer_s)] : [],
        [s.scaling_factor.toFixed(3), s.buckets.length, s.speedup_vs_ddp.toFixed(3) + "x"]), {"data-strategy": s.name, "class": s.name === (d.recommended ? d.recommended.strategy : d.best) ? "best" : null});
    });

    el("h3", {}, sec, "Timeline: " + d.timelines.map(function (t) { return t.strategy; }).join(" vs "));
    var W = 1000, L = 170, R = 80, lane = 22, gap = 18, top = 8;
    var tmax = Math.max.apply(null, d.timelines.map(function (t) { return t.iteration_s; })) || 1;
    var H = top + d.timelines.length * (2 * lane + gap) + 28;
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "timelines", role: "img"}, sec);
    function x(t) { return L + (W - L - R) * t / tmax; }
    d.timelines.forEach(function (tl, i) {
      var g = svgEl("g", {"class": "timeline", "data-strategy": tl.strategy}, svg);
      var y0 = top + i * (2 * lane + gap), n = 0;
      var nar = tl.spans.filter(function (s) { return s.kind === "allreduce"; }).length;
      svgEl("text", {x: L - 6, y: y0 + lane * 0.7, "text-anchor": "end"}, g, tl.strategy + ": compute");
      svgEl("text", {x: L - 6, y: y0 + lane * 1.7, "text-anchor": "end"}, g, tl.strategy + ": all-reduce (" + nar + ")");
      tl.spans.forEach(function (s) {
        var w = Math.max(x(s.end_s) - x(s.start_s), 0.6);
        if (s.kind === "allreduce") {
          var b = s.bucket !== null && s.bucket !== undefined ? byName[tl.strategy].buckets[s.bucket] : null;
          var text = (b ? bucketTip(d, tl.strategy, s.bucket, b) : tl.strategy + ", " + s.name + ": " + bytesText(s.bytes)) +
            "\n" + ms(s.start_s) + " - " + ms(s.end_s) + " ms (" + ms(s.end_s - s.start_s) + " ms)";
          hoverable(svgEl("rect", {"class": "allreduce", "data-bucket": s.bucket, "data-bytes": s.bytes, x: x(s.start_s), y: y0 + lane + 2,
            width: w, height: lane - 4, fill: COMM[n++ % 2]}, g), text);
        } else {
          hoverable(svgEl("rect", {"class": "compute " + s.kind, x: x(s.start_s), y: y0 + 2, width: w, height: lane - 4,
            fill: KIND_COLORS[s.kind] || "#999"}, g), tl.strategy + ", " + s.name + ": " + ms(s.start_s) + " - " + ms(s.end_s) + " ms");
        }
      });
      svgEl("text", {x: x(tl.iteration_s) + 4, y: y0 + lane * 1.2}, g, ms(tl.iteration_s) + " ms");
    });
    var ax = svgEl("g", {"class": "axis"}, svg), ya = H - 24;
    svgEl("line", {x1: L, x2: W - R, y1: ya, y2: ya}, ax);
    niceTicks(0, tmax * 1e3, 8).forEach(function (v) {
      svgEl("line", {x1: x(v / 1e3), x2: x(v / 1e3), y1: ya, y2: ya + 4}, ax);
      svgEl("text", {x: x(v / 1e3), y: ya + 16, "text-anchor": "middle"}, ax, String(v));
    });
    svgEl("text", {x: W - R + 4, y: ya + 16}, ax, "ms");
    var kinds = {};
    d.timelines.forEach(function (t) { t.spans.forEach(function (s) { kinds[s.kind] = true; }); });
    legend(sec, ["forward", "backward", "optimizer"].filter(function (k) { return kinds[k]; }).map(function (k) { return [k, KIND_COLORS[k]]; })
      .concat([["all-reduce (alternate buckets shaded)", COMM[0]]]));

    el("h3", {}, sec, "Bucket layout over the model's tensors (ready order, first ready at the left)");
    var ctl = el("p", {"class": "note"}, sec, "width by: ");
    var box = el("div", {}, sec);
    ["tensors", "bytes"].forEach(function (m, i) {
      var id = "layout-by-" + m;
      var r = el("input", {type: "radio", name: "layout-by", id: id, value: m}, ctl);
      if (i === 0) r.checked = true;
      el("label", {"for": id}, ctl, m + " ");
      r.addEventListener("change", function () { drawLayout(box, d, m); });
    });
    drawLayout(box, d, "tensors");
  }
  function drawLayout(box, d, mode) {
    while (box.firstChild) box.removeChild(box.firstChild);
    var W = 1000, L = 170, R = 10, h = 18, gap = 6;
    var pos = [0], total;
    d.tensors.forEach(function (t, i) { pos.push(pos[i] + (mode === "bytes" ? t.bytes : 1)); });
    total = pos[pos.length - 1] || 1;
    var H = d.strategies.length * (h + gap) + 4;
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "layout"}, box);
    d.strategies.forEach(function (s, i) {
      var g = svgEl("g", {"class": "layout-row", "data-strategy": s.name}, svg), y = 2 + i * (h + gap);
      svgEl("text", {x: L - 6, y: y + h * 0.75, "text-anchor": "end"}, g, s.name + " (" + s.buckets.length + ")");
      s.buckets.forEach(function (b, j) {
        var lo = Math.min.apply(null, b.tensors), hi = Math.max.apply(null, b.tensors);
        var x0 = L + (W - L - R) * pos[lo] / total, x1 = L + (W - L - R) * pos[hi + 1] / total;
        hoverable(svgEl("rect", {"class": "bucket", "data-bucket": j, x: x0, y: y, width: Math.max(x1 - x0, 0.6), height: h,
          fill: COMM[j % 2], stroke: "#fff", "stroke-width": 0.3}, g), bucketTip(d, s.name, j, b));
      });
    });
  }

  // ---- charts shared by scale and validate -------------------------------------------------
  function lineChart(parent, o) {
    var W = 480, H = 300, L = 52, R = 22, T = 24, B = 40;  // R: room for the last x label (16384)
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "chart", style: "max-width:540px;display:inline-block"}, parent);
    var xs = [], ys = [];
    o.series.forEach(function (s) { s.pts.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    function tr(v, log) { return log ? Math.log2(v) : v; }
    var x0 = tr(Math.min.apply(null, xs), true), x1 = tr(Math.max.apply(null, xs), true);
    var y0 = o.ylog ? tr(Math.min.apply(null, ys), true) : 0, y1 = tr(Math.max.apply(null, ys.concat(o.ymax || 0)), o.ylog);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y1 += 1; }
    function X(v) { return L + (W - L - R) * (tr(v, true) - x0) / (x1 - x0); }
    function Y(v) { return H - B - (H - T - B) * (tr(v, o.ylog) - y0) / (y1 - y0); }
    svgEl("text", {x: W / 2, y: 14, "text-anchor": "middle", "font-weight": "bold"}, svg, o.title);
    var ax = svgEl("g", {"class": "axis"}, svg);
    svgEl("line", {x1: L, x2: W - R, y1: H - B, y2: H - B}, ax);
    svgEl("line", {x1: L, x2: L, y1: T, y2: H - B}, ax);
    var wsAll = xs.filter(function (v, i) { return xs.indexOf(v) === i; }).sort(function (a, b) { return a - b; });
    wsAll.forEach(function (w) { svgEl("text", {x: X(w), y: H - B + 14, "text-anchor": "middle"}, ax, String(w)); });
    svgEl("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"}, ax, "workers");
    var yt = o.ylog ? niceTicks(y0, y1, 6).filter(function (v) { return Math.abs(v - Math.round(v)) < 1e-9; }).map(function (v) { return Math.pow(2, v); })
      : niceTicks(0, y1, 5);
    yt.forEach(function (v) {
      svgEl("line", {"class": "grid", x1: L - 3, x2: W - R, y1: Y(v), y2: Y(v)}, ax);
      svgEl("text", {x: L - 5, y: Y(v) + 4, "text-anchor": "end"}, ax, String(o.ylog ? Math.round(v) : +v.toPrecision(4)));
    });
    o.series.forEach(function (s, i) {
      var g = svgEl("g", {"class": "series", "data-strategy": s.name}, svg), c = s.color || PALETTE[i % PALETTE.length];
      svgEl("polyline", {points: s.pts.map(function (p) { return X(p[0]) + "," + Y(p[1]); }).join(" "), fill: "none", stroke: c,
        "stroke-width": s.width || 1.5, "stroke-dasharray": s.dash || null}, g);
      s.pts.forEach(function (p) { if (p[2]) hoverable(svgEl("circle", {"class": "point", cx: X(p[0]), cy: Y(p[1]), r: 3, fill: c}, g), p[2]); });
    });
  }

  // ---- scale --------------------------------------------------------------------------------
  function renderScale(sec, d) {
    el("h2", {}, sec, d.title);
    var groups = {}, order = [], workers = [];
    d.rows.forEach(function (r) {
      var k = JSON.stringify([r.model, r.algorithm]);
      if (!groups[k]) { groups[k] = {model: r.model, algorithm: r.algorithm, series: {}, names: []}; order.push(k); }
      var g = groups[k];
      if (!g.series[r.strategy]) { g.series[r.strategy] = []; g.names.push(r.strategy); }
      g.series[r.strategy].push(r);
      if (workers.indexOf(r.workers) < 0) workers.push(r.workers);
    });
    workers.sort(function (a, b) { return a - b; });
    el("h3", {}, sec, "Scaling factor T1 / (N T_N) per series");
    var tb = table(sec, ["model", "algorithm", "strategy"].concat(workers.map(String)), 3);
    order.forEach(function (k) {
      var g = groups[k];
      g.names.forEach(function (n) {
        var by = {}; g.series[n].forEach(function (r) { by[r.workers] = r; });
        row(tb, [g.model, g.algorithm, n].concat(workers.map(function (w) { return by[w] ? by[w].scaling_factor.toFixed(3) + (by[w].bend ? "*" : "") : "-"; })),
          {"data-strategy": n, "data-model": g.model, "data-algorithm": g.algorithm}, 3);
      });
    });
    var said = {bend: " bends (10% below its best so far)", synceasgd_overtakes_wfbp: ": synceasgd overtakes wfbp", optimal_one_bucket: ": optimal collapses to one bucket"};
    var notes = [];
    d.rows.forEach(function (r) {
      Object.keys(said).forEach(function (k) {
        if (r[k]) notes.push(r.model + " (" + r.algorithm + ") at " + r.workers + " workers" + (k === "bend" ? ", " + r.strategy : "") + said[k]);
      });
    });
    if (notes.length) {
      var ul = el("ul", {"class": "markers"}, sec);
      notes.forEach(function (t) { el("li", {"class": "marker"}, ul, t); });
    }
    order.forEach(function (k) {
      var g = groups[k];
      el("h3", {}, sec, g.model + ", " + g.algorithm);
      var box = el("div", {"class": "charts"}, sec);
      function series(key, label) {
        return g.names.map(function (n, i) {
          var pts = g.series[n].slice().sort(function (a, b) { return a.workers - b.workers; });
          return {name: n, width: n === "optimal" ? 2.6 : 1.4, dash: n === "wfbp" || n === "synceasgd" ? "5,3" : null, color: PALETTE[i % PALETTE.length],
            pts: pts.map(function (r) { return [r.workers, r[key], n + " at " + r.workers + " workers: " + label + " " + r[key].toFixed(3) +
              "\niteration " + ms(r.iteration_s) + " ms" + (r.buckets ? ", " + r.buckets + " buckets" : "")]; })};
        });
      }
      lineChart(box, {title: "scaling factor", series: series("scaling_factor", "scaling factor"), ymax: 1});
      var sp = series("speedup", "speedup");
      var ws = workers.filter(function (w) { return g.names.some(function (n) { return g.series[n].some(function (r) { return r.workers === w; }); }); });
      sp.push({name: "linear", color: "#aaa", dash: "2,3", width: 1, pts: ws.map(function (w) { return [w, w, null]; })});
      lineChart(box, {title: "speedup over one worker", series: sp, ylog: true});
      legend(sec, g.names.map(function (n, i) { return [n, PALETTE[i % PALETTE.length]]; }));
    });
  }

  // ---- validate -----------------------------------------------------------------------------
  function renderValidate(sec, d) {
    el("h2", {}, sec, d.title);
    el("p", {"class": "note"}, sec, d.model + " (batch " + d.batch_size + ") on " + d.world_size + " ranks, " + d.backend +
      "; every plan run by stock DDP with its caps, median of " + d.rounds + " x " + d.steps_per_round + " steps. Measured range: min to max; error interval: 95% bootstrap.");
    var names = Object.keys(d.strategies).sort(function (a, b) { return d.strategies[a].measured_s - d.strategies[b].measured_s; });
    var tb = table(sec, ["strategy", "buckets", "predicted ms", "measured ms [min, max]", "error [95% interval]", "error, numbers before run", "speedup vs stock DDP [95%]"]);
    function cells(n, r, speed) {
      return [n, r.buckets, ms(r.iteration_s), ms(r.measured_s) + " [" + ms(r.measured_min_s) + ", " + ms(r.measured_max_s) + "]",
        pct(r.error) + " [" + pct(r.error_ci95[0]) + ", " + pct(r.error_ci95[1]) + "]",
        r.error_before_run === null ? "-" : pct(r.error_before_run), speed];
    }
    names.forEach(function (n) {
      var r = d.strategies[n];
      row(tb, cells(n, r, r.speedup_vs_stock_ddp.toFixed(3) + "x [" + r.speedup_ci95[0].toFixed(3) + ", " + r.speedup_ci95[1].toFixed(3) + "]"),
        {"data-strategy": n, "class": n === d.best_measured ? "best" : null});
    });
    row(tb, cells("stock DDP (defaults)", d.stock_ddp, "1.000x"), {"data-reference": "stock_ddp", "class": "reference"});

    var all = names.map(function (n) { return [n, d.strategies[n]]; }).concat([["stock DDP (defaults)", d.stock_ddp]]);
    var W = 1000, L = 170, R = 60, h = 22, T = 10;
    // step times
    el("h3", {}, sec, "Step time: measured (median, min-max range) vs predicted");
    var lo = Math.min.apply(null, all.map(function (a) { return Math.min(a[1].measured_min_s, a[1].iteration_s); }));
    var hi = Math.max.apply(null, all.map(function (a) { return Math.max(a[1].measured_max_s, a[1].iteration_s); }));
    lo = Math.max(0, lo - 0.05 * (hi - lo)); hi = hi + 0.05 * (hi - lo || hi || 1);
    var H = T + all.length * h + 30, svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "validate-times"}, sec);
    function X(v) { return L + (W - L - R) * (v - lo) / (hi - lo); }
    all.forEach(function (a, i) {
      var r = a[1], y = T + i * h + h / 2, g = svgEl("g", {"class": "validate-row", "data-strategy": a[0]}, svg);
      svgEl("text", {x: L - 6, y: y + 4, "text-anchor": "end"}, g, a[0]);
      hoverable(svgEl("line", {"class": "interval", x1: X(r.measured_min_s), x2: X(r.measured_max_s), y1: y, y2: y, stroke: "#3182bd", "stroke-width": 3}, g),
        a[0] + ": measured " + ms(r.measured_min_s) + " - " + ms(r.measured_max_s) + " ms");
      hoverable(svgEl("circle", {"class": "measured", cx: X(r.measured_s), cy: y, r: 5, fill: "#3182bd"}, g), a[0] + ": measured median " + ms(r.measured_s) + " ms");
      var px = X(r.iteration_s);
      hoverable(svgEl("path", {"class": "predicted", d: "M" + px + "," + (y - 7) + "l6,7l-6,7l-6,-7z", fill: "#fdae6b", stroke: "#e6550d"}, g),
        a[0] + ": predicted " + ms(r.iteration_s) + " ms (error " + pct(r.error) + ")");
    });
    var ax = svgEl("g", {"class": "axis"}, svg), ya = H - 22;
    svgEl("line", {x1: L, x2: W - R, y1: ya, y2: ya}, ax);
    niceTicks(lo * 1e3, hi * 1e3, 8).forEach(function (v) { svgEl("text", {x: X(v / 1e3), y: ya + 14, "text-anchor": "middle"}, ax, String(v)); });
    svgEl("text", {x: W - R + 4, y: ya + 14}, ax, "ms");
    legend(sec, [["measured median and min-max", "#3182bd"], ["predicted", "#fdae6b"]]);
    // errors
    el("h3", {}, sec, "Prediction error (predicted / measured - 1) with its 95% interval");
    var e = all.map(function (a) { return [a[1].error, a[1].error_ci95[0], a[1].error_ci95[1]]; });
    var elo = Math.min(0, Math.min.apply(null, e.map(function (v) { return Math.min.apply(null, v); })));
    var ehi = Math.max(0, Math.max.apply(null, e.map(function (v) { return Math.max.apply(null, v); })));
    var pad = 0.05 * (ehi - elo || 0.1); elo -= pad; ehi += pad;
    var svg2 = svgEl("svg", {viewBox: "0 0 " + W + " " + H, "class": "validate-errors"}, sec);
    function EX(v) { return L + (W - L - R) * (v - elo) / (ehi - elo); }
    svgEl("line", {x1: EX(0), x2: EX(0), y1: T, y2: H - 22, stroke: "#999", "stroke-dasharray": "3,3"}, svg2);
    all.forEach(function (a, i) {
      var r = a[1], y = T + i * h + h / 2, g = svgEl("g", {"class": "validate-row", "data-strategy": a[0]}, svg2);
      svgEl("text", {x: L - 6, y: y + 4, "text-anchor": "end"}, g, a[0]);
      var text = a[0] + ": error " + pct(r.error) + ", 95% interval [" + pct(r.error_ci95[0]) + ", " + pct(r.error_ci95[1]) + "]";
      hoverable(svgEl("line", {"class": "interval", x1: EX(r.error_ci95[0]), x2: EX(r.error_ci95[1]), y1: y, y2: y, stroke: "#e6550d", "stroke-width": 2}, g), text);
      hoverable(svgEl("circle", {"class": "error-point", cx: EX(r.error), cy: y, r: 4, fill: "#e6550d"}, g), text);
    });
    var ax2 = svgEl("g", {"class": "axis"}, svg2);
    svgEl("line", {x1: L, x2: W - R, y1: ya, y2: ya}, ax2);
    niceTicks(elo * 100, ehi * 100, 8).forEach(function (v) { svgEl("text", {x: EX(v / 100), y: ya + 14, "text-anchor": "middle"}, ax2, v + "%"); });
  }

  var RENDER = {plan: renderPlan, scale: renderScale, validate: renderValidate};
  var MAX_TIP = __MAX_TIP__;
  var main = document.getElementById("report");
  try {
    var doc = JSON.parse(document.getElementById("report-data").textContent);
    var titles = doc.sections.map(function (s) { return s.title; });
    document.title = "commsched: " + titles.join("; ");
    document.getElementById("title").textContent = "commsched: " + titles.join("; ");
    document.getElementById("sources").textContent = "from " + doc.sections.map(function (s) { return s.source || s.kind; }).join(", ");
    doc.sections.forEach(function (s) { RENDER[s.kind](el("section", {id: s.kind, "class": "report-section"}, main), s); });
    document.body.setAttribute("data-rendered", "true");
  } catch (err) {
    el("p", {"class": "error"}, main, "could not draw the report: " + err);
    console.error("commsched report:", err);  // a test's browser log sees it
  }
})();
""".replace("__MAX_TIP__", str(MAX_TIP_TENSORS))
