"""The PNG plots are readable: legends never sit on an axis label, a title, the plotted area or the
markers' labels, and in scale.png a strategy keeps one colour (issue 32, item 6).

Each plot is drawn with the real functions; the figure is captured when it is saved and its
artists' boxes are compared in display pixels, as the saved PNG lays them out.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from commsched.report.plots import gantt_png, scaling_png, validation_png  # noqa: E402
from commsched.scale.markers import Marker  # noqa: E402
from commsched.types import Span, Timeline  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def saved_figures(monkeypatch):
    """Every figure the plots save, drawn (so that text boxes have their final extents)."""
    figs: list[Figure] = []
    real = Figure.savefig

    def capture(self, *args, **kwargs):
        real(self, *args, **kwargs)
        figs.append(self)

    monkeypatch.setattr(Figure, "savefig", capture)
    return figs


def _box(artist, fig):
    if not isinstance(fig.canvas, FigureCanvasAgg):  # pyplot's close leaves a canvas that cannot lay text out
        FigureCanvasAgg(fig).draw()
    return artist.get_window_extent(fig.canvas.get_renderer())


def _overlap(a, b) -> bool:
    """Boxes that share more than a pixel each way (touching edges do not count)."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def _timeline(k: int, optimizer: bool = False) -> Timeline:
    spans = [Span("forward", "forward", 0.0, 0.03), Span("backward", "backward", 0.03, 0.09)]
    t = 0.035
    for j in range(k):
        spans.append(Span("allreduce", f"b{j}", t, t + 0.015, 1 << 20))
        t += 0.016
    if optimizer:
        spans.append(Span("optimizer", "optimizer", t, t + 0.01))
        t += 0.01
    return Timeline(tuple(spans), t, 0.09, 0.015 * k, max(0.0, t - 0.09))


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_gantt_legend_clear_of_axis_label_title_and_bars(tmp_path, saved_figures, n):
    # n = 1: `make run`'s gantt.png when the recommended plan is also the fastest and stock DDP's
    timelines = {f"s{i}": _timeline(3 + i, optimizer=i == 0) for i in range(n)}
    gantt_png(timelines, tmp_path / "g.png", title="resnet50 on v100-10gbe (16 workers)")
    (fig,) = saved_figures
    (ax,) = fig.axes
    legend = _box(ax.get_legend(), fig)
    for other in (ax.xaxis.label, ax.title, *ax.get_xticklabels(), *ax.get_yticklabels()):
        assert not _overlap(legend, _box(other, fig)), f"the legend covers {other.get_text()!r} with {n} timeline(s)"
    assert not _overlap(legend, ax.get_window_extent()), f"the legend covers the bars with {n} timeline(s)"


def _rows(algos: list[str], strategies: list[str]) -> list[dict]:
    rows = []
    for a_i, algo in enumerate(algos):
        for s_i, st in enumerate(strategies):
            for w in (4, 8, 16, 32, 64):
                sf = 1.0 / (1 + 0.01 * (s_i + 1) * (a_i + 1) * w)
                rows.append({
                    "model": "resnet50", "strategy": st, "algorithm": algo, "workers": w, "iteration_s": 0.1 / sf,
                    "compute_s": 0.1, "non_overlapped_comm_s": 0.1 / sf - 0.1, "scaling_factor": sf, "speedup": w * sf,
                })
    return rows


STRATEGIES = ["wfbp", "synceasgd", "ddp", "horovod", "horovod-legacy", "mgwfbp", "adafusion", "optimal"]


def test_scale_legend_outside_the_panels_and_marker_labels(tmp_path, saved_figures):
    markers = [
        Marker(model="resnet50", algorithm="ring", strategy="synceasgd", kind="synceasgd_overtakes_wfbp", workers=8),
        Marker(model="resnet50", algorithm="ring", strategy="wfbp", kind="bend", workers=16),
    ]
    scaling_png(_rows(["ring"], STRATEGIES), tmp_path / "scale.png", title="predicted scaling", markers=markers)
    (fig,) = saved_figures
    ax_sf, ax_sp = fig.axes
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    texts = [t for t in ax_sf.texts if "wfbp" in t.get_text()]
    assert texts, "the synceasgd-overtakes-wfbp marker is labelled"
    for legend in legends:
        box = _box(legend, fig)
        for ax in fig.axes:
            assert not _overlap(box, ax.get_window_extent()), "a legend lies over a panel"
        for t in texts:
            assert not _overlap(box, _box(t, fig)), "a legend covers a marker's label"


ALGORITHMS = ["ring", "tree", "double_binary_tree", "recursive_doubling", "recursive_halving_doubling"]


@pytest.mark.parametrize("n_algos", [3, 5])
def test_scale_one_colour_per_strategy_across_algorithms(tmp_path, saved_figures, n_algos):
    # eight strategies x three (or all five flat) algorithms: more series than matplotlib's 10 colours
    algos = ALGORITHMS[:n_algos]
    scaling_png(_rows(algos, STRATEGIES), tmp_path / "scale.png")
    (fig,) = saved_figures
    # the dash pattern itself: get_linestyle() reads "--" for every custom pattern
    styles = {str(line._unscaled_dash_pattern) for ax in fig.axes for line in ax.get_lines() if "(" in line.get_label()}
    assert len(styles) == n_algos, "a line style per algorithm"
    colour: dict[str, set] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            label = line.get_label()
            if "(" in label:
                colour.setdefault(label.split(" (")[0], set()).add(matplotlib.colors.to_hex(line.get_color()))
    assert set(colour) == set(STRATEGIES)
    assert all(len(c) == 1 for c in colour.values()), colour
    hexes = [next(iter(c)) for c in colour.values()]
    assert len(set(hexes)) == len(hexes), "two strategies share a colour"
    assert matplotlib.colors.to_hex("gray") not in hexes and "#7f7f7f" not in hexes, "grey is the linear line's"


def test_validation_legend_clear_of_title_and_bars(tmp_path, saved_figures):
    report = json.loads((DATA / "validate-report.json").read_text())
    validation_png(report, tmp_path / "validate.png")
    (fig,) = saved_figures
    (ax,) = fig.axes
    legend = _box(ax.get_legend(), fig)
    assert not _overlap(legend, ax.get_window_extent()), "the legend lies over the bars"
    assert not _overlap(legend, _box(ax.title, fig)), "the legend covers the title"
    errors = [t for t in ax.texts if t.get_text().endswith("%")]
    assert len(errors) == len(report["strategies"])


@pytest.mark.parametrize("n_models", [1, 6, 10])
def test_scale_title_worker_labels_and_speedups_below_one_stay_readable(tmp_path, saved_figures, n_models):
    """A probe's scale.png of 10 models drew the title into the first panels' titles, 20 worker
    counts ran their labels together ("5121024 2048"), and a speedup of 0.25 was labelled "0"."""
    rows = []
    for m in range(n_models):
        for w in (2**k for k in range(1, 21)):
            sf = 1.0 / (1 + 0.5 * w) if m == 0 else 1.0 / (1 + 0.001 * w)
            rows.append({"model": f"model{m}", "strategy": "ddp", "algorithm": "ring", "workers": w, "iteration_s": 0.1 / sf,
                         "compute_s": 0.1, "non_overlapped_comm_s": 0.1 / sf - 0.1, "scaling_factor": sf, "speedup": w * sf})
    scaling_png(rows, tmp_path / "scale.png", title="predicted scaling on v100-10gbe")
    (fig,) = saved_figures
    title = _box(fig._suptitle, fig)
    for ax in fig.axes:
        assert not _overlap(title, _box(ax.title, fig)), "the title runs into a panel's title"
    ax_sf, ax_sp = fig.axes[:2]
    FigureCanvasAgg(fig).draw() if not isinstance(fig.canvas, FigureCanvasAgg) else fig.canvas.draw()
    shown = [t for t in ax_sf.get_xticklabels() if t.get_text()]
    boxes = [_box(t, fig) for t in shown]
    assert len(shown) <= 12 and not any(_overlap(a, b) for a, b in zip(boxes, boxes[1:]))
    speedups = [t.get_text() for t in ax_sp.get_yticklabels() if t.get_text()]
    assert "0" not in speedups and any(s.startswith("0.") for s in speedups)
    assert not any("e+" in s for s in speedups)  # 2**20 workers read "1.04858e+06"


def test_scale_panels_keep_the_models_order(tmp_path, saved_figures):
    """scale's table lists models as given; the figure sorted them by name (resnet50 above bert_base)."""
    rows = [{"model": m, "strategy": "ddp", "algorithm": "ring", "workers": w, "iteration_s": 0.2, "compute_s": 0.1,
             "non_overlapped_comm_s": 0.1, "scaling_factor": 0.5, "speedup": w * 0.5}
            for m in ("resnet50", "bert_base", "alexnet") for w in (2, 4)]
    scaling_png(rows, tmp_path / "scale.png")
    (fig,) = saved_figures
    assert [ax.get_title() for ax in fig.axes[::2]] == ["resnet50", "bert_base", "alexnet"]
