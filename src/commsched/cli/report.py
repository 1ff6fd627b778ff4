"""``commsched report``: one self-contained HTML page of a plan comparison, a scale sweep or a validate run."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--from", "from_path", default="out", show_default=True,
              help="A directory that plan/scale/validate --out wrote, or one report-data.json, scale.csv or validate.json.")
@click.option("--out", "out_path", default=None, help="HTML file to write (default: report.html in the --from directory).")
def report(from_path, out_path) -> None:
    """One self-contained HTML page (no network needed) of a plan comparison, a scale sweep or a validate run."""
    from commsched.report.html import load_sections, write_report

    src = Path(from_path)
    sections = load_sections(src)  # every input checked before the page is written
    # one file's page is named by its kind, as scale and validate name theirs: plan's report.html stays
    default = "report.html" if src.is_dir() or sections[0].kind == "plan" else f"{sections[0].kind}-report.html"
    out = Path(out_path) if out_path else (src if src.is_dir() else src.parent) / default
    write_report(out, sections)
    click.echo(f"wrote {out} ({', '.join(f'{s.kind} from {s.source}' for s in sections)})", err=True)
