"""PNG figures: a Gantt chart of timelines and scaling curves. matplotlib is imported lazily, with
the non-interactive Agg backend, so computation never needs a display."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from commsched.types import Timeline

_COLORS = {"forward": "#9ecae1", "backward": "#3182bd", "optimizer": "#756bb1"}
_COMM = ("#e6550d", "#fdae6b")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gantt_png(timelines: dict[str, Timeline], path: str | Path, title: str = "") -> Path:
    """Two lanes per timeline (compute, all-reduce); all-reduces alternate colours so buckets stand apart."""
    plt = _pyplot()
    n = len(timelines)
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.85 * n), dpi=120)
    yticks, ylabels = [], []
    scale, unit = 1e3, "ms"
    for row, (label, tl) in enumerate(reversed(list(timelines.items()))):
        base = row * 3
        n_comm = 0
        for s in tl.spans:
            y = base + (1 if s.kind != "allreduce" else 0)
            color = _COLORS.get(s.kind)
            if s.kind == "allreduce":
                color = _COMM[n_comm % 2]
                n_comm += 1
            ax.broken_barh([(s.start_s * scale, max(s.duration_s, 0.0) * scale)], (y + 0.1, 0.8), facecolors=color, edgecolor="none")
        ax.text(tl.iteration_s * scale, base + 0.5, f"  {tl.iteration_s * scale:.1f} {unit}", va="center", fontsize=8)
        yticks += [base + 0.5, base + 1.5]
        ylabels += [f"{label}: all-reduce ({len(tl.allreduces)})", f"{label}: compute"]
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or "one training iteration", fontsize=10)
    from matplotlib.patches import Patch

    kinds = {s.kind for tl in timelines.values() for s in tl.spans}
    handles = [Patch(color=c, label=k) for k, c in _COLORS.items() if k in kinds]
    handles.append(Patch(color=_COMM[0], label="all-reduce (alternate buckets shaded)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncol=4, frameon=False)
    xmax = max(tl.iteration_s for tl in timelines.values()) * scale
    ax.set_xlim(0, xmax * 1.12)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, bbox_inches="tight")
    plt.close(fig)
    return p


def scaling_png(rows: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """Scaling factor and speedup against worker count, one line per (model, strategy, algorithm).

    ``rows`` are the rows of :func:`commsched.scale.sweep` (keys: model, strategy, algorithm,
    workers, scaling_factor, speedup).
    """
    plt = _pyplot()
    from matplotlib.ticker import ScalarFormatter

    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["model"], r["strategy"], r["algorithm"]), []).append(r)
    models = sorted({k[0] for k in series})
    algos = sorted({k[2] for k in series})
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 3.6 * len(models)), dpi=110, squeeze=False)
    for mi, model in enumerate(models):
        ax_sf, ax_sp = axes[mi]
        for (m, strategy, algo), pts in sorted(series.items()):
            if m != model:
                continue
            pts = sorted(pts, key=lambda r: r["workers"])
            ws = [r["workers"] for r in pts]
            label = strategy if len(algos) == 1 else f"{strategy} ({algo})"
            style = "-" if strategy == "optimal" else "--" if strategy in ("wfbp", "synceasgd") else "-."
            width = 2.6 if strategy == "optimal" else 1.2
            ax_sf.plot(ws, [r["scaling_factor"] for r in pts], style, lw=width, marker="o", ms=3, label=label)
            ax_sp.plot(ws, [r["speedup"] for r in pts], style, lw=width, marker="o", ms=3, label=label)
        ws_all = sorted({r["workers"] for r in rows if r["model"] == model})
        ax_sp.plot(ws_all, ws_all, ":", color="gray", label="linear")
        for ax, ylabel in ((ax_sf, "scaling factor T1/(N T_N)"), (ax_sp, "speedup over one worker")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ws_all, [str(w) for w in ws_all], fontsize=7)
            ax.minorticks_off()
            ax.set_xlabel("workers")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
            ax.set_title(f"{model}", fontsize=10)
        ax_sp.set_yscale("log", base=2)
        ax_sp.yaxis.set_major_formatter(ScalarFormatter())
        ax_sf.set_ylim(0, 1.05)
        ax_sf.legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p)
    plt.close(fig)
    return p


def validation_png(report: dict, path: str | Path) -> Path:
    """Predicted vs measured step time per strategy (bars: measured median with min-max whiskers)."""
    plt = _pyplot()
    rows = sorted(report["strategies"].items(), key=lambda kv: kv[1]["measured_s"])
    names = [k for k, _ in rows]
    meas = [r["measured_s"] * 1e3 for _, r in rows]
    lo = [(r["measured_s"] - r["measured_min_s"]) * 1e3 for _, r in rows]
    hi = [(r["measured_max_s"] - r["measured_s"]) * 1e3 for _, r in rows]
    pred = [r["iteration_s"] * 1e3 for _, r in rows]
    raw = [r["no_contention_s"] * 1e3 for _, r in rows]
    fig, ax = plt.subplots(figsize=(10, 4.2), dpi=120)
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], meas, 0.4, yerr=[lo, hi], capsize=3, color="#3182bd", label="measured (median, min-max)")
    ax.bar([x + 0.2 for x in xs], pred, 0.4, color="#fdae6b", label="predicted (with contention)")
    ax.scatter([x + 0.2 for x in xs], raw, marker="_", s=200, color="#e6550d", zorder=3, label="predicted without contention")
    stock = report["stock_ddp"]["measured_s"] * 1e3
    ax.axhline(stock, color="gray", ls=":", label=f"stock DDP measured ({stock:.0f} ms)")
    for x, r in zip(xs, (r for _, r in rows)):
        ax.text(x + 0.2, r["iteration_s"] * 1e3, f"{r['error']:+.0%}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title(
        f"{report['model']} (batch {report['batch_size']}), {report['world_size']} ranks ({report['backend']}): "
        f"predicted vs measured", fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, bbox_inches="tight")
    plt.close(fig)
    return p
