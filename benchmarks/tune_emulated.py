"""Tuning inside the job against what users do today, on the emulated 2-node cluster (issue 33).

Run (as root, from the repo):
    .venv/bin/python benchmarks/tune_emulated.py --rate-mbit 2000 --steps 500 --out out/tune

For each model, ``commsched emulate --nodes 2 --rate-mbit R -- benchmarks/tune_job.py ...`` trains
N steps of every variant (stock DDP's defaults; ``commsched.DataParallel(tune=True)``, tuning
included; stock DDP with ``bucket_cap_mb`` in {1, 5, 10, 25, 50, 100}) and this prints one markdown
row per model: each total, the tuned job and the best cap against stock DDP's defaults, and the
steps each approach spent searching. The hand sweep is charged what a user pays to run it:
``SWEEP_STEPS`` steps at every cap (its search steps), at the caps' measured median step times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

MODELS = {
    # name: (model spec, tune_job arguments)
    "resnet18": ("resnet18", ["--batch-size", "16", "--image-size", "64"]),
    "bert_small": ("bert_small", ["--batch-size", "8"]),
    "mobilenet_v2": ("mobilenet_v2", ["--batch-size", "16", "--image-size", "64"]),
    "tied_lm": ("benchmarks.custom_models:tied_lm", ["--batch-size", "8"]),
    "mixed_mlp": ("benchmarks.custom_models:mixed_mlp", ["--batch-size", "32"]),
    "gated_experts": ("benchmarks.custom_models:gated_experts", ["--batch-size", "32", "--find-unused"]),
    # 213 tensors, 20 MiB, MBConv blocks (many small tensors): new to tuning on 2026-11-27
    "efficientnet_b0": ("efficientnet_b0", ["--batch-size", "8", "--image-size", "64"]),
    # 187 tensors, 52 MB, inception blocks: new to tuning on 2026-11-27 (after efficientnet_b0)
    "googlenet": ("googlenet", ["--batch-size", "8", "--image-size", "64"]),
    # 11 tensors, 48 MiB, a recurrent scan: not in the zoo, new to tuning on 2026-11-27 (after the race)
    "lstm_lm": ("benchmarks.custom_models:lstm_lm", ["--batch-size", "8"]),
    # 364 tensors, 30 MiB, dense blocks (many small tensors, concatenations): new to tuning on 2026-11-27
    "densenet121": ("densenet121", ["--batch-size", "8", "--image-size", "64"]),
    # 68 tensors, 38 MiB, an encoder-decoder transformer with three 8 MiB tensors: not in the zoo,
    # new to tuning on 2026-11-27 (after densenet121)
    "seq2seq": ("benchmarks.custom_models:seq2seq", ["--batch-size", "8"]),
}
FIRST_STEPS = 200  # issue 33's bound on tuning's cost is over a job's first 200 steps
SWEEP_STEPS = 20  # steps a hand sweep runs at each cap to compare them (5 of them warm-up)
CAPS = (1, 5, 10, 25, 50, 100)


def summarise(doc: dict) -> dict:
    tot = {v: statistics.median(ts) for v, ts in doc["totals_s"].items()}
    step = {v: statistics.median([s for run in runs for s in run[5:]]) for v, runs in doc["steps_s"].items()}
    stock = tot["stock"]
    caps = {c: tot[f"cap{c}"] for c in CAPS if f"cap{c}" in tot}
    best = min(caps, key=caps.get) if caps else None
    row = {"stock_s": stock, "tuned_s": tot.get("tuned"), "caps_s": caps, "best_cap": best}
    if best is not None:
        # what the sweep itself cost: SWEEP_STEPS at every cap, beyond running the best cap throughout
        row["sweep_search_steps"] = SWEEP_STEPS * len(caps)
        row["sweep_with_search_s"] = caps[best] + sum(SWEEP_STEPS * (step[f"cap{c}"] - step[f"cap{best}"]) for c in caps)
    keys = ("decision", "kept", "reason", "steps_to_decide", "steps_by_variant", "trial_pairs", "tuner_own_s", "cost_s", "cost_budget_s")
    if doc["tuning"]:
        row["tuning"] = {k: doc["tuning"][0].get(k) for k in keys}
        row["tuning_runs"] = [{k: t.get(k) for k in keys} for t in doc["tuning"]]
    repeats = len(doc["totals_s"]["stock"])
    if repeats > 1:
        # paired: repeat r ran every variant once, in a random order, so the ratio of their totals in
        # one repeat shares that repeat's state of the machine (BENCHMARKS.md, section 11)
        runs = doc["totals_s"]
        row["repeats"] = repeats
        row["paired"] = {v: spread([a / b for a, b in zip(runs["stock"], ts)]) for v, ts in runs.items() if v != "stock" and len(ts) == repeats}
        head = {v: [sum(run[:FIRST_STEPS]) for run in rs] for v, rs in doc["steps_s"].items() if all(len(run) >= FIRST_STEPS for run in rs)}
        if "tuned" in head and "stock" in head and len(head["tuned"]) == repeats:
            # item 2's bound: the first FIRST_STEPS steps, where tuning spends what it spends
            row["paired_first"] = spread([a / b for a, b in zip(head["stock"], head["tuned"])])
        if "tuned" in runs and best is not None:
            row["tuned_vs_best_cap"] = spread([a / b for a, b in zip(runs[f"cap{best}"], runs["tuned"])])
    return row


def decided(t: dict) -> str:
    """The plan tuning kept (runs before tuning named it: its decision, plan or stock)."""
    return t.get("kept") or t.get("decision")


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "values": xs}


def fmt_spread(d: dict) -> str:
    return f"{d['median']:.3f}x [{d['min']:.3f}, {d['max']:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-mbit", default="2000")
    ap.add_argument("--steps", default="500")
    ap.add_argument("--repeats", default="1", help="jobs per variant, the variants in a random order per repeat (paired)")
    ap.add_argument("--variants", default=None, help="tune_job.py's variants (default: all), e.g. stock,tuned,cap1")
    ap.add_argument("--models", default="resnet18,bert_small,tied_lm,mixed_mlp")
    ap.add_argument("--out", default="out/tune")
    ap.add_argument("--timeout-s", default="0")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    rows = {}
    for name in args.models.split(","):
        spec, extra = MODELS[name]
        out = Path(args.out).resolve() / args.rate_mbit / f"{name}.json"
        cmd = [
            sys.executable, "-m", "commsched", "emulate", "--nodes", "2", "--rate-mbit", args.rate_mbit, "--timeout-s", args.timeout_s, "--",
            str(Path(__file__).resolve().parent / "tune_job.py"), "--model", spec, *extra, "--steps", args.steps,
            "--repeats", args.repeats, "--out", str(out),
        ] + (["--variants", args.variants] if args.variants else [])
        if not args.report_only:
            print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows[name] = summarise(json.loads(out.read_text()))
    print(f"Rate {args.rate_mbit} Mbit/s, {args.steps} steps per job.\n")
    print("| model | stock DDP defaults s | tuned s (vs stock) | best cap: MiB, s (vs stock) | sweep with its search s (vs stock) | tuning: kept, steps to decide (plan steps), its cost | sweep's search steps |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        s = r["stock_s"]
        tuned = f"{r['tuned_s']:.1f} ({s / r['tuned_s']:.3f}x)" if r.get("tuned_s") else "-"
        best = f"{r['best_cap']}, {r['caps_s'][r['best_cap']]:.1f} ({s / r['caps_s'][r['best_cap']]:.3f}x)" if r.get("best_cap") else "-"
        sweep = f"{r['sweep_with_search_s']:.1f} ({s / r['sweep_with_search_s']:.3f}x)" if "sweep_with_search_s" in r else "-"
        t = r.get("tuning") or {}
        cost = f", cost {t['cost_s']:.2f} s" if t.get("cost_s") is not None else ""
        tuning = f"{decided(t)}, {t.get('steps_to_decide')} ({(t.get('steps_by_variant') or {}).get('plan', 0)}){cost}" if t else "-"
        print(f"| {name} | {s:.1f} | {tuned} | {best} | {sweep} | {tuning} | {r.get('sweep_search_steps', '-')} |")
    for name, r in rows.items():
        caps = ", ".join(f"{c}: {v:.1f}" for c, v in r["caps_s"].items())
        print(f"\n{name}: caps {caps}; tuning: {(r.get('tuning') or {}).get('reason')}")
    paired = {n: r for n, r in rows.items() if "paired" in r}
    if paired:
        print("\nPaired (each repeat runs every variant once; ratios of totals within a repeat, median [min, max]):\n")
        print(f"| model | repeats | stock DDP median s | tuned median s | tuned vs stock, paired | the same over the first {FIRST_STEPS} steps | best cap vs stock, paired | tuned vs best cap, paired | tuning per repeat: kept, steps to decide (plan steps), cost |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, r in paired.items():
            p, b = r["paired"], r.get("best_cap")
            tuned = fmt_spread(p["tuned"]) if "tuned" in p else "-"
            cap = f"{b}: {fmt_spread(p[f'cap{b}'])}" if b is not None else "-"
            vs_cap = fmt_spread(r["tuned_vs_best_cap"]) if "tuned_vs_best_cap" in r else "-"
            runs = "; ".join(
                f"{decided(t)}, {t.get('steps_to_decide')} ({(t.get('steps_by_variant') or {}).get('plan', 0)}), {t['cost_s']:.2f} s"
                if t.get("cost_s") is not None else f"{decided(t)}, {t.get('steps_to_decide')}"
                for t in r.get("tuning_runs", [])
            )
            tuned_s = f"{r['tuned_s']:.1f}" if r.get("tuned_s") else "-"
            first = fmt_spread(r["paired_first"]) if "paired_first" in r else "-"
            print(f"| {name} | {r['repeats']} | {r['stock_s']:.1f} | {tuned_s} | {tuned} | {first} | {cap} | {vs_cap} | {runs or '-'} |")


if __name__ == "__main__":
    main()
