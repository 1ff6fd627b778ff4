"""The ``validate.json`` document: built, written as the rounds complete, read back, printed.

A run writes ``validate.json`` after planning and again after every round, marked ``"partial":
true`` with ``rounds_done``: what has been measured so far (the plans, the numbers they were made
from, every variant's timed steps, the raw profile steps and probes), so that a run stopped before
its end keeps it. :func:`finish_partial` makes such a document's predictions from what it holds. At
the end the whole report (:func:`build_report`) replaces it, ``"partial": false``. The format is
``schemas/validate.v1.json``; every reader (the CLI, ``commsched report``, the benchmark scripts)
goes through :func:`load_validate_report`. Pure: no torch.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path

from commsched.calibrate.compute import contention_of
from commsched.calibrate.profile_steps import ProfileSteps, profile_steps_of
from commsched.calibrate.stats import STOCK, predictions
from commsched.cost.cluster import ClusterSpec, cluster_from_json
from commsched.errors import CommschedError
from commsched.sim.semantics import Semantics
from commsched.types import ModelProfile, Plan

SCHEMA = "commsched.validate/v1"


# --- building ------------------------------------------------------------------------------------


def profile_summary(p: ModelProfile) -> dict:
    """A profile's totals as the report keeps them (``profile``, ``profile_before_run``)."""
    return {"forward_s": p.forward_s, "backward_s": p.backward_s, "optimizer_s": p.optimizer_s, "tensors": len(p.tensors), "bytes": p.total_bytes}


def measured_timeline(records: list) -> dict:
    """Medians over a rank's recorded steps (:class:`commsched.runtime.record.StepRecord`): end of
    backward, end of the last all-reduce, and the time all-reduces were in flight (seconds since the
    start of forward); None each without records."""
    if not records:
        return {"backward_end_s": None, "allreduce_end_s": None, "allreduce_busy_s": None}
    return {
        "backward_end_s": statistics.median(max(t for t in r.ready_s if t == t) for r in records),
        "allreduce_end_s": statistics.median(max(r.bucket_end_s) for r in records),
        "allreduce_busy_s": statistics.median(sum(e - s for s, e in zip(r.bucket_start_s, r.bucket_end_s)) for r in records),
    }


def max_or_none(values) -> float | None:
    """The largest of the values that are not None; None when none is."""
    vs = [v for v in values if v is not None]
    return max(vs) if vs else None


def header(
    *, model: str, batch_size: int, image_size: int | None, world_size: int, backend: str, rounds: int, steps_per_round: int,
    min_gain: float, profile_before: ModelProfile, cluster: ClusterSpec, fit: dict, comm_samples: dict, semantics_before: Semantics,
    contention_before: dict, plans: dict[str, dict], probe: dict, memory: dict | None = None, recommended: dict | None = None,
) -> dict:
    """What a run knows once its plans are made: the start of every document it writes. ``plans``
    are JSON (:func:`commsched.formats.io.plan_to_json`); ``probe`` the probe's set-up
    (``long_message_bytes``, ``chain_calls``, ``long_message_ended_early``), which the report's
    ``contention`` carries; ``memory`` the estimate the run checked before it started;
    ``recommended`` what the numbers before the run recommend running
    (:meth:`commsched.planners.compare.Recommendation.to_json`)."""
    doc = {
        "schema": SCHEMA,
        "model": model,
        "batch_size": batch_size,
        "image_size": image_size,
        "world_size": world_size,
        "backend": backend,
        "rounds": rounds,
        "steps_per_round": steps_per_round,
        "min_gain": min_gain,  # what the recommendation asks of a plan over stock DDP's buckets
        "profile_before_run": profile_summary(profile_before),
        "cluster": cluster.to_json(),  # as measured before the rounds (what the plans were made from)
        "fit": fit,
        "comm_samples": comm_samples,
        "semantics_before_run": semantics_before.to_json(),
        "contention_before_run": contention_before,
        "plans": plans,
        "probe": probe,
    }
    if memory is not None:
        doc["memory"] = memory
    if recommended is not None:
        doc["recommended"] = recommended
    return doc


def _raw(steps_table: ProfileSteps | None, probes: list[dict], light_before: dict[str, list[int]]) -> dict:
    steps = steps_table.raw() if steps_table is not None else {
        "forward_end_s": [], "ready_s": [], "optimizer_s": [], "finalize_s": [], "backward_unrecorded_s": [],
    }
    return {"probes": probes, "profile_steps": {**steps, "light_before": light_before}}


def partial_report(
    head: dict, rounds_done: int, steps_table: ProfileSteps | None, probes: list[dict], measured: dict[str, list[float]],
    light_before: dict[str, list[int]], memory: dict | None = None,
) -> dict:
    """The document of a run after ``rounds_done`` rounds: ``head`` (:func:`header`), every variant's
    timed steps so far (the slowest rank's, run order; stock DDP's under ``STOCK``), and the raw
    profile steps and probes of those rounds, marked ``"partial": true``."""
    doc = {**head, "partial": True, "rounds_done": rounds_done, "measured_steps_s": measured, "raw": _raw(steps_table, probes, light_before)}
    if memory is not None:
        doc["memory"] = memory
    return doc


def build_report(
    head: dict,
    steps_table: ProfileSteps,
    probes: list[dict],
    measured: dict[str, list[float]],
    light_before: dict[str, list[int]],
    resamples: int,
    threads: int,
    timelines: list[dict] | None = None,
    rounds_done: int | None = None,
    memory: dict | None = None,
) -> tuple[dict, Semantics, ClusterSpec]:
    """The whole report from what the rounds measured, with (the semantics that predicted, the
    cluster with the cost table brought to the rounds' minutes). ``steps_table`` and ``probes`` are
    the rounds' (every rank's); ``measured`` every variant's timed steps (stock DDP's under
    ``STOCK``); ``timelines`` per rank {variant: :func:`measured_timeline`} of the recorded steps
    after the rounds (None: not recorded, the measured timelines are None). ``rounds_done`` below
    the run's rounds marks a report made from a partial run (:func:`finish_partial`)."""
    from commsched.formats.io import plan_from_json

    cluster = cluster_from_json(head["cluster"])
    plans: dict[str, Plan] = {name: plan_from_json(doc, where=name) for name, doc in head["plans"].items()}
    contention = {**contention_of(probes, resamples, threads), **head.get("probe", {})}
    rows, semantics, cost_in_rounds = predictions(
        steps_table, probes, contention, cluster, plans, measured, head["steps_per_round"], resamples, head["backend"], threads, light_before
    )
    for name, row in rows.items():
        row["timeline"]["measured"] = (
            {k: max_or_none(t[name][k] for t in timelines) for k in timelines[0][name]} if timelines else measured_timeline([])
        )
    stock = rows.pop(STOCK)
    profile = steps_table.profile()
    in_rounds = replace(cluster, allreduce=cost_in_rounds)
    report = {key: value for key, value in head.items() if key not in ("probe", "memory")}
    done = head["rounds"] if rounds_done is None else rounds_done
    report.update(
        partial=done < head["rounds"],
        rounds_done=done,
        profile=profile_summary(profile),
        cluster_in_rounds=in_rounds.to_json(),  # what predicts
        semantics=semantics.to_json(),
        contention=contention,
        stock_ddp=stock,
        strategies=rows,
        # what the predictions were made from, so that they can be made again (another model, say)
        raw=_raw(steps_table, probes, light_before),
    )
    if "ddp" in rows:
        # the same buckets, expressed through caps: any difference is this machine's noise
        report["ddp_caps_vs_stock_ddp"] = 1 / rows["ddp"]["speedup_vs_stock_ddp"] - 1
    report["best_measured"] = min(rows, key=lambda k: rows[k]["measured_s"])
    mem = memory if memory is not None else head.get("memory")
    if mem is not None:
        report["memory"] = mem
    return report, semantics, in_rounds


FINISH_RESAMPLES = 200  # bootstrap resamples of a partial run's intervals, finished after it stopped


def finish_partial(doc: dict, order: ModelProfile, resamples: int | None = None) -> dict:
    """The report of a partial ``validate.json`` (a run stopped after ``rounds_done`` rounds): its
    predictions made from the whole rounds it measured, as the run would have made them at its end
    (without the recorded timelines, which come after the last round). ``order`` gives the tensors'
    names and bytes in ready order (the ``profile.json`` written beside it). A finished report is
    returned as it is."""
    if not doc.get("partial") or "measured_steps_s" not in doc:
        return doc
    resamples = FINISH_RESAMPLES if resamples is None else resamples
    done, steps = doc["rounds_done"], doc["steps_per_round"]
    if done < 1:
        raise CommschedError("this validate run stopped before its first round ended: there is nothing to predict against")
    head = {k: v for k, v in doc.items() if k not in ("partial", "rounds_done", "measured_steps_s", "raw")}
    steps_table = profile_steps_of(doc, order)
    light_before = {k: v[:done] for k, v in doc["raw"]["profile_steps"]["light_before"].items()}
    measured = {k: v[: done * steps] for k, v in doc["measured_steps_s"].items()}
    report, _, _ = build_report(
        head, steps_table, doc["raw"]["probes"], measured, light_before, resamples, doc["contention_before_run"]["threads"], rounds_done=done
    )
    return report


# --- writing -------------------------------------------------------------------------------------


def write_atomic(path: Path, doc: object) -> None:
    """``doc`` as JSON at ``path``, written beside it first and renamed over it: a run killed while
    writing leaves the previous document whole."""
    from commsched.formats.io import dumps

    text = dumps(doc, str(path), indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- reading -------------------------------------------------------------------------------------


def is_validate_report(doc: object) -> bool:
    """Whether ``doc`` is a ``validate.json``, finished or partial (by its fields: files from before
    the ``schema`` field have none)."""
    return isinstance(doc, dict) and (doc.get("schema") == SCHEMA or "stock_ddp" in doc)


def load_validate_report(path: str | Path, *, partial: bool = False) -> dict:
    """A ``validate.json`` that ``validate`` wrote (any version of this format), checked for what
    its readers use: a finished report has ``strategies`` (an object) and ``stock_ddp``. A partial
    one (a run stopped after ``rounds_done`` rounds) is returned as written with ``partial``; else it
    is finished here (:func:`finish_partial`, with the ``profile.json`` the run wrote beside it),
    with a warning that says from how many rounds, or, without that profile, an error saying so."""
    import warnings

    from commsched.formats.io import load_profile, read_json

    p = Path(path)
    doc = read_json(p)
    if not is_validate_report(doc):
        raise CommschedError(f"{p}: not a validate.json (needs 'strategies' and 'stock_ddp', or schema {SCHEMA!r})")
    if doc.get("partial") and "stock_ddp" not in doc:
        if partial:
            return doc
        held = f"a partial validate run ({doc.get('rounds_done')} of {doc.get('rounds')} rounds measured, stopped before its predictions)"
        order = p.parent / "profile.json"
        if not order.is_file():
            raise CommschedError(
                f"{p}: {held}, and no profile.json beside it (the run writes one before its first round) to make them from"
            )
        profile = load_profile(order)
        before = doc.get("profile_before_run") or {}
        if (before.get("tensors"), before.get("bytes")) != (len(profile.tensors), profile.total_bytes):
            raise CommschedError(
                f"{p}: {held}, and {order} beside it is not its run's profile ({len(profile.tensors)} tensors, "
                f"{profile.total_bytes} bytes, where the run's had {before.get('tensors')} and {before.get('bytes')})"
            )
        try:
            doc = finish_partial(doc, profile)
        except CommschedError as e:
            raise CommschedError(f"{p}: {e}") from None
        warnings.warn(f"{p}: {held}: predicted here from the rounds it measured", UserWarning, stacklevel=2)
    if not isinstance(doc.get("strategies"), dict) or "stock_ddp" not in doc:
        raise CommschedError(f"{p}: not a validate.json (needs 'strategies' and 'stock_ddp')")
    return doc


# --- printing ------------------------------------------------------------------------------------


def size_text(b: int) -> str:
    """Bytes in the largest of B, KiB, MiB that keeps a whole number."""
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def describe_semantics(sem: Semantics) -> str:
    """The measured semantics in one line (the progress output and the table's title)."""
    two = f" ({sem.compute_slowdown_many:+.0%} under two)" if sem.threads > 1 else ""
    under = ", ".join(f"{size_text(b)} x{f:.2f}" for b, f in sem.under_compute) or "x1"
    return (
        f"{sem.backend} ({sem.threads} thread{'s' if sem.threads > 1 else ''}, gain {sem.concurrency_gain:.2f}), "
        f"compute {sem.compute_slowdown:+.0%} under an all-reduce{two}, all-reduces under compute {under} "
        f"{_launched(sem)}, {sem.launch_compute_s * 1e6:.0f} us of compute per launch"
    )


def _launched(sem: Semantics) -> str:
    ratios = ", ".join(f"{size_text(b)} x{r:.2f}" for b, r in sem.launch_factor_points)
    d = f", {sem.call_overhead_s * 1e6:+.0f} us per call" if sem.call_overhead_s else ""
    return f"(launched from backward: {ratios or 'x1'}{d})"


def paired_cell(row: dict) -> str:
    """A row's paired error and its interval as a table cell; "-" for reports from before it was
    measured (``repredict`` makes it)."""
    if "error_paired" not in row:
        return "-"
    lo, hi = row["error_paired_ci95"]
    return f"{row['error_paired']:+.1%} [{lo:+.1%}, {hi:+.1%}]"


def print_report(report: dict) -> None:
    """The report as a table on stdout: per strategy and stock DDP, predicted against measured with
    the errors and the speedup over stock DDP, then a line of summary."""
    from rich.console import Console
    from rich.table import Table as RichTable

    sem = report["semantics"]
    rounds = report.get("rounds_done", report["rounds"])
    t = RichTable(
        title=(
            f"{report['model']} (batch {report['batch_size']}) on {report['world_size']} ranks, {report['backend']}, "
            f"every plan run by stock DDP with its caps: predicted vs measured step time (median of "
            f"{rounds} x {report['steps_per_round']}; {describe_semantics(Semantics(**sem))})"
        ),
        title_justify="left",
    )
    for c in (
        "strategy", "buckets", "predicted ms", "measured ms [min, max]", "error [95% interval]", "error paired in time [95%]",
        "error, numbers before run", "speedup vs stock DDP [95%]",
    ):
        t.add_column(c, justify="left" if c == "strategy" else "right")
    for name, r in sorted(report["strategies"].items(), key=lambda kv: kv[1]["measured_s"]):
        t.add_row(
            name,
            str(r["buckets"]),
            f"{r['iteration_s'] * 1e3:.1f}",
            f"{r['measured_s'] * 1e3:.1f} [{r['measured_min_s'] * 1e3:.1f}, {r['measured_max_s'] * 1e3:.1f}]",
            f"{r['error']:+.1%} [{r['error_ci95'][0]:+.1%}, {r['error_ci95'][1]:+.1%}]",
            paired_cell(r),
            f"{r['error_before_run']:+.1%}",
            f"{r['speedup_vs_stock_ddp']:.3f}x [{r['speedup_ci95'][0]:.3f}, {r['speedup_ci95'][1]:.3f}]",
        )
    s = report["stock_ddp"]
    t.add_row(
        f"{STOCK} (defaults)", str(s["buckets"]), f"{s['iteration_s'] * 1e3:.1f}",
        f"{s['measured_s'] * 1e3:.1f} [{s['measured_min_s'] * 1e3:.1f}, {s['measured_max_s'] * 1e3:.1f}]",
        f"{s['error']:+.1%} [{s['error_ci95'][0]:+.1%}, {s['error_ci95'][1]:+.1%}]", paired_cell(s), "-", "1.000x",
    )
    rec = report.get("recommended")  # absent in reports written before the recommendation existed
    if rec is not None:
        t.caption = f"recommended before the run (what `commsched plan` would have written): {rec['strategy']}, {rec['reason']}"
        t.caption_justify = "left"
    Console(width=170).print(t)
    errs = [abs(r["error"]) for r in report["strategies"].values()] + [abs(s["error"])]
    before = [abs(r["error_before_run"]) for r in report["strategies"].values()]
    paired = [abs(r["error_paired"]) for r in [*report["strategies"].values(), s] if "error_paired" in r]
    msg = (
        f"prediction error: median {statistics.median(errs):.1%}, worst {max(errs):.1%} "
        + (f"(paired in time: median {statistics.median(paired):.1%}, worst {max(paired):.1%}) " if paired else "")
        + f"(from the numbers measured before the run: median {statistics.median(before):.1%}, worst {max(before):.1%})"
    )
    if "ddp_caps_vs_stock_ddp" in report:
        msg += f"; DDP's buckets through caps vs stock DDP's defaults: {report['ddp_caps_vs_stock_ddp']:+.1%}"
    Console(stderr=False).print(msg)
