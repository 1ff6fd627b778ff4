"""PNG figures: a Gantt chart of timelines and scaling curves. matplotlib is imported lazily, with
the non-interactive Agg backend, so computation never needs a display.

A plot cannot fail for its data: :func:`check_timelines` and :func:`check_scaling_rows` reject what
matplotlib cannot draw (a non-finite number, an empty series, a worker count or speedup that a log
axis cannot show) as a CommschedError before anything is drawn, and the CLI calls them before it
prints or writes anything. Any error matplotlib still raises while drawing or saving becomes a
one-line CommschedError naming the file; only the file system (OSError) can fail a plot otherwise.
Names (models, strategies, clusters) are drawn as plain text: a ``$`` never starts matplotlib's
mathtext (``$$`` or ``$\\frac$`` in a model name would fail to parse), and a string that is not
valid Unicode is drawn with escapes. matplotlib's warnings (a glyph missing from the font) are not
printed: the CLI's stderr is for errors.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from commsched.errors import CommschedError
from commsched.types import Timeline, shown

_COLORS = {"forward": "#9ecae1", "backward": "#3182bd", "optimizer": "#756bb1"}
_COMM = ("#e6550d", "#fdae6b")
_ALGO_STYLES = ("-", "--", "-.", (0, (1, 1)), (0, (5, 1, 1, 1, 1, 1)))  # scale.png: one per all-reduce algorithm


MAX_PLOT_ROWS = 100
"""Models in one scale.png (a row of two panels each, 396 px high) or timelines in one Gantt chart
(102 px each): 100 stays far inside matplotlib's limit of 2**16 pixels per image side."""


def _text(s: object) -> str:
    """A name as matplotlib plain text: ``$`` escaped (no mathtext), unpaired surrogates escaped."""
    return str(s).encode("utf-8", "backslashreplace").decode("utf-8").replace("$", r"\$")


def _finite(what: str, v: object, *, positive: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and not v > 0):
        need = "a finite number > 0" if positive else "a finite number"
        raise CommschedError(f"cannot plot {what}: it must be {need}, got {shown(v)}")


def check_timelines(timelines: Mapping[str, Timeline]) -> None:
    """What :func:`gantt_png` needs: at least one timeline, every span and total finite."""
    if not timelines:
        raise CommschedError("cannot plot a Gantt chart of no timelines")
    if len(timelines) > MAX_PLOT_ROWS:
        raise CommschedError(f"cannot plot {len(timelines)} timelines in one Gantt chart; at most {MAX_PLOT_ROWS}")
    for label, tl in timelines.items():
        _finite(f"{label!r} iteration_s", tl.iteration_s)
        for s in tl.spans:
            _finite(f"{label!r} span {s.name!r} start", s.start_s)
            _finite(f"{label!r} span {s.name!r} end", s.end_s)


_ROW_NUMBERS = ("iteration_s", "compute_s", "non_overlapped_comm_s", "scaling_factor", "speedup")


def check_scaling_rows(rows: Sequence[Mapping]) -> None:
    """What :func:`scaling_png` and the CSV need: rows with every number finite, worker counts and
    speedups > 0 (both are drawn on log axes)."""
    if not rows:
        raise CommschedError("cannot plot scaling curves of no rows")
    models = {r.get("model") for r in rows}
    if len(models) > MAX_PLOT_ROWS:
        raise CommschedError(f"cannot plot scaling curves of {len(models)} models in one figure; at most {MAX_PLOT_ROWS}")
    for r in rows:
        where = f"{r.get('model')!r} {r.get('strategy')!r} ({r.get('algorithm')!r}) at {r.get('workers')!r} workers"
        w = r.get("workers")
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise CommschedError(f"cannot plot {where}: the worker count must be a positive integer")
        for key in _ROW_NUMBERS:
            _finite(f"{where} {key}", r.get(key), positive=key in ("speedup", "iteration_s"))


@contextlib.contextmanager
def _drawing(path: str | Path) -> Iterator[None]:
    """matplotlib's own failures while drawing or saving as one CommschedError line; OSError (an
    unwritable directory, a full disk) passes through to the CLI's file-system message."""
    plt = _pyplot()
    before = set(plt.get_fignums())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except OSError:
        raise
    except (ValueError, OverflowError, RuntimeError, ArithmeticError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CommschedError(f"{path}: matplotlib could not draw the plot: {first}") from None
    finally:
        for num in set(plt.get_fignums()) - before:  # a figure left open by a failure
            plt.close(num)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gantt_png(timelines: dict[str, Timeline], path: str | Path, title: str = "") -> Path:
    """Two lanes per timeline (compute, all-reduce); all-reduces alternate colours so buckets stand apart."""
    check_timelines(timelines)
    with _drawing(path):
        return _gantt_png(timelines, path, title)


def _gantt_png(timelines: dict[str, Timeline], path: str | Path, title: str) -> Path:
    plt = _pyplot()
    fig = gantt_figure(timelines, title)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, bbox_inches="tight")
    plt.close(fig)
    return p


def gantt_figure(timelines: dict[str, Timeline], title: str = ""):
    """The figure :func:`gantt_png` saves (open; the caller closes it). The legend sits in one row
    between the title and the axes, placed in points from the axes' top edge: below the axes, in
    axes fractions, it met the x-axis label on a chart of one timeline, whose axes are short."""
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
        ylabels += [f"{_text(label)}: all-reduce ({len(tl.allreduces)})", f"{_text(label)}: compute"]
    ax.set_yticks(yticks, ylabels, fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    kinds = {s.kind for tl in timelines.values() for s in tl.spans}
    handles = [Patch(color=c, label=k) for k, c in _COLORS.items() if k in kinds]
    handles.append(Patch(color=_COMM[0], label="all-reduce (alternate buckets shaded)"))
    ax.legend(
        handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), borderaxespad=0.3,
        fontsize=7, ncol=len(handles), frameon=False,
    )
    # the title above the legend's row: pad in points, whatever the axes' height
    ax.set_title(_text(title) or "one training iteration", fontsize=10, pad=20)
    xmax = max(tl.iteration_s for tl in timelines.values()) * scale
    ax.set_xlim(0, xmax * 1.12)
    return fig


def scaling_png(rows: Sequence[dict], path: str | Path, title: str = "", markers: Sequence = ()) -> Path:
    """Scaling factor and speedup against worker count, one line per (model, strategy, algorithm).

    ``rows`` are the rows of :func:`commsched.scale.sweep` (keys: model, strategy, algorithm,
    workers, scaling_factor, speedup). ``markers`` (:func:`commsched.scale.find_markers`): a ring on
    a curve where it bends, a labelled dotted line where synceasgd overtakes wfbp and where optimal
    collapses to one bucket.
    """
    check_scaling_rows(rows)
    with _drawing(path):
        return _scaling_png(rows, path, title, markers)


def _scaling_png(rows: Sequence[dict], path: str | Path, title: str, markers: Sequence = ()) -> Path:
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["model"], r["strategy"], r["algorithm"]), []).append(r)
    models = list(dict.fromkeys(k[0] for k in series))  # as the table lists them
    algos = sorted({k[2] for k in series})
    strategies = sorted({k[1] for k in series})
    # A strategy keeps one colour in every panel; with several algorithms the line style says the
    # algorithm (with one colour per series, 24 series cycled through 10 colours and two unrelated
    # curves shared a colour).
    # tab10 without its grey, which the "linear" line and the markers' lines use
    palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7] if len(strategies) <= 9 else plt.get_cmap("tab20").colors
    colour = {st: palette[i % len(palette)] for i, st in enumerate(strategies)}
    algo_style = {a: _ALGO_STYLES[i % len(_ALGO_STYLES)] for i, a in enumerate(algos)}

    def style_of(strategy: str, algo: str) -> str | tuple:
        if len(algos) > 1:
            return algo_style[algo]
        return "-" if strategy == "optimal" else "--" if strategy in ("wfbp", "synceasgd") else "-."

    fig, axes = plt.subplots(len(models), 2, figsize=(12, 3.6 * len(models)), dpi=110, squeeze=False)
    for mi, model in enumerate(models):
        ax_sf, ax_sp = axes[mi]
        for (m, strategy, algo), pts in sorted(series.items()):
            if m != model:
                continue
            pts = sorted(pts, key=lambda r: r["workers"])
            ws = [r["workers"] for r in pts]
            label = _text(strategy if len(algos) == 1 else f"{strategy} ({algo})")
            style = style_of(strategy, algo)
            width = 2.6 if strategy == "optimal" else 1.2
            kw = {"ls": style, "lw": width, "marker": "o", "ms": 3, "color": colour[strategy], "label": label}
            ax_sf.plot(ws, [r["scaling_factor"] for r in pts], **kw)
            # commsched.scale.markers: a ring where the curve bends
            for mk in markers:
                if (mk.model, mk.strategy, mk.algorithm, mk.kind) == (m, strategy, algo, "bend"):
                    at = next(r for r in pts if r["workers"] == mk.workers)
                    ax_sf.plot([mk.workers], [at["scaling_factor"]], "o", ms=9, mfc="none", color=colour[strategy])
            ax_sp.plot(ws, [r["speedup"] for r in pts], **kw)
        ws_all = sorted({r["workers"] for r in rows if r["model"] == model})
        ax_sp.plot(ws_all, ws_all, ":", color="gray", label="linear")
        for ax, ylabel in ((ax_sf, "scaling factor T1/(N T_N)"), (ax_sp, "speedup over one worker")):
            ax.set_xscale("log", base=2)
            # at most about 12 labels: beyond that they ran together ("5121024 2048")
            every = -(-len(ws_all) // 12)
            ax.set_xticks(ws_all, [str(w) if i % every == 0 else "" for i, w in enumerate(ws_all)], fontsize=7)
            ax.minorticks_off()
            ax.set_xlabel("workers")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3, which="both")
            ax.set_title(_text(model), fontsize=10)
        ax_sp.set_yscale("log", base=2)
        # 0.25, not "0"; 1048576, not "1.04858e+06" (which ran into the axis label)
        ax_sp.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 1 else f"{v:g}"))
        ax_sf.set_ylim(0, 1.05)
        for mk in markers:  # synceasgd overtaking wfbp, optimal's one bucket: a labelled vertical line
            if mk.model == model and mk.kind != "bend":
                text = "synceasgd < wfbp" if mk.kind == "synceasgd_overtakes_wfbp" else "optimal: 1 bucket"
                text += "" if len(algos) == 1 else f" ({mk.algorithm})"
                ax_sf.axvline(mk.workers, color="gray", ls=":", lw=0.8)
                ax_sf.text(
                    mk.workers, 0.02, _text(text), rotation=90, fontsize=6, va="bottom", ha="right",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1},
                )
        # one legend per model, outside the panels on the right: inside, it hid curves and the
        # markers' labels at the bottom of the scaling-factor panel
        if len(algos) == 1:
            handles, labels = ax_sp.get_legend_handles_labels()
        else:  # a colour per strategy and a line style per algorithm, not one entry per pair
            from matplotlib.lines import Line2D

            handles = [Line2D([], [], color=colour[st], lw=2.6 if st == "optimal" else 1.2, marker="o", ms=3) for st in strategies]
            handles += [Line2D([], [], color="black", ls=algo_style[a], lw=1.2) for a in algos]
            handles += [Line2D([], [], color="gray", ls=":")]
            labels = [_text(st) for st in strategies] + [_text(a) for a in algos] + ["linear"]
        ax_sp.legend(handles, labels, fontsize=7, ncol=1 if len(labels) <= 16 else 2, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    # the title gets its own half inch at the top: in a figure fractions of whose height are inches
    # apart, tight_layout alone let it run into the first panels' titles
    top = 1.0 - (0.5 / fig.get_figheight() if title else 0.0)
    if title:
        fig.suptitle(_text(title), fontsize=11, y=1.0 - 0.15 / fig.get_figheight(), va="top")
    fig.tight_layout(rect=(0.0, 0.0, 1.0, top))
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, bbox_inches="tight")
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
        # the prediction's error at the foot of its bar, where neither the no-contention mark nor a
        # whisker reaches (on the bar's top the mark covered it)
        ax.text(x + 0.2, 0, f"{r['error']:+.0%}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
    ax.set_xlabel("in each predicted bar: the prediction's error, predicted / measured - 1", fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title(
        f"{report['model']} (batch {report['batch_size']}), {report['world_size']} ranks ({report['backend']}): "
        f"predicted vs measured", fontsize=10, pad=34,
    )
    # above the axes in two rows: inside, tall whiskers on the left ran into it
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False, borderaxespad=0.3)
    ax.grid(axis="y", alpha=0.3)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, bbox_inches="tight")
    plt.close(fig)
    return p
