"""benchmarks/tune_emulated.py's table from the stored results, and the models it uses that are not in
the zoo (benchmarks/custom_models.py) build through the import-path loader and train a step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report(folder: str, rate: str, models: str) -> str:
    """tune_emulated.py's tables from the results stored under benchmarks/data/tune/``folder``."""
    r = subprocess.run(
        [sys.executable, "benchmarks/tune_emulated.py", "--report-only", "--rate-mbit", rate, "--out", f"benchmarks/data/tune/{folder}", "--models", models],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_the_stored_results_make_the_table_in_benchmarks_md():
    bench = (ROOT / "BENCHMARKS.md").read_text()
    out = _report("", "2000", "tied_lm,resnet18")
    assert "| tied_lm | 146.8 | 129.1 (1.137x) | 5, 128.1 (1.146x) | 130.9 (1.122x) | plan, 41 (17), cost -0.07 s | 120 |" in out
    assert "| resnet18 | 141.2 | 132.9 (1.063x) | 1, 130.5 (1.082x) | 134.2 (1.052x) | plan, 37 (15), cost 0.02 s | 120 |" in out
    assert "129.1 (**1.137x**)" in bench and "| 141.2 | 132.9 (**1.063x**) |" in bench
    out = _report("", "500", "tied_lm,gated_experts,mobilenet_v2")
    assert "| gated_experts | 202.0 | 202.7 (0.997x) | 25, 200.1 (1.009x) | 200.2 (1.009x) | stock, 11 (0), cost 0.44 s | 120 |" in out
    assert "| mobilenet_v2 | 142.8 | 144.7 (0.987x) | 5, 142.8 (1.000x) | 146.2 (0.977x) | stock, 11 (0), cost 0.43 s | 120 |" in out
    assert "| 202.0 | 202.7 (0.997x) |" in bench and "| 142.8 | 144.7 (0.987x) |" in bench
    out = _report("", "500", "efficientnet_b0")
    assert "| efficientnet_b0 | 205.8 | 210.8 (0.976x) | 1, 205.0 (1.004x) | 209.2 (0.984x) | stock, 53 (22), cost 0.68 s | 120 |" in out
    assert "| 205.8 | 210.8 (0.976x) |" in bench
    out = _report("", "2000", "googlenet,lstm_lm")
    assert "| googlenet | 152.7 | 146.1 (1.045x) | 1, 146.4 (1.043x) | 150.0 (1.018x) | plan, 37 (15), cost 0.04 s | 120 |" in out
    assert "| 152.7 | 146.1 (**1.045x**) | 1, 146.4 (1.043x) | 150.0 (1.018x) |" in bench
    assert "| lstm_lm | 160.3 | 160.9 (0.996x) | 10, 159.6 (1.004x) | 161.2 (0.994x) | stock, 11 (0), cost 0.21 s | 120 |" in out
    assert "| 160.3 | 160.9 (0.996x) | 10, 159.6 (1.004x) | 161.2 (0.994x) |" in bench
    out = _report("", "2000", "seq2seq")
    assert "| seq2seq | 244.3 | 252.8 (0.966x) | 5, 219.9 (1.111x) | 225.4 (1.084x) | bucket_cap_mb=1, 125 (69), cost 0.61 s | 120 |" in out
    assert "| 244.3 | 252.8 (0.966x) | 5, 219.9 (1.111x) | 225.4 (1.084x) |" in bench
    out = _report("", "500", "bert_small")
    assert "| bert_small | 308.7 | 253.1 (1.219x) | 1, 251.4 (1.228x) | 262.7 (1.175x) | optimal, 117 (95), cost -9.88 s | 120 |" in out
    assert "| 308.7 | 253.1 (**1.219x**) | 1, 251.4 (1.228x) | 262.7 (1.175x) |" in bench


PAIRED = {  # (folder, rate): {model: the row's cells from "tuned vs stock" to the tuning per repeat, as BENCHMARKS.md has them}
    ("paired", "2000"): {
        "gated_experts": "0.993x [0.992, 0.993] | 0.996x [0.991, 0.996] | - | - | stock, 11 (0), 0.10 s; stock, 11 (0), 0.11 s; stock, 11 (0), 0.10 s",
        "resnet18": "1.016x [0.971, 1.023] | 0.999x [0.984, 1.014] | 1: 1.063x [1.060, 1.065] | 0.954x [0.913, 0.965] | stock, 11 (0), 0.21 s; plan, 37 (15), 0.10 s; plan, 77 (35), 0.29 s",
    },
    ("paired", "500"): {
        "efficientnet_b0": "0.997x [0.995, 0.998] | 0.998x [0.987, 1.002] | - | - | stock, 11 (0), 0.43 s; stock, 11 (0), 0.42 s; stock, 11 (0), 0.42 s",
        "mobilenet_v2": "1.005x [1.003, 1.012] | 1.002x [0.993, 1.025] | - | - | stock, 11 (0), 0.42 s; stock, 11 (0), 0.43 s; stock, 11 (0), 0.42 s",
        "tied_lm": "1.085x [1.083, 1.106] | 1.074x [1.071, 1.097] | 1: 1.121x [1.110, 1.125] | 0.977x [0.962, 0.987] | plan, 37 (15), -0.17 s; plan, 37 (15), -0.22 s; plan, 37 (15), -0.16 s",
    },
    ("race", "2000"): {
        "resnet18": "1.066x [0.996, 1.077] | 1.040x [0.999, 1.057] | 1: 1.061x [1.059, 1.068] | 0.998x [0.939, 1.017] | bucket_cap_mb=1, 83 (61), 0.21 s; stock, 11 (0), 0.19 s; optimal, 103 (81), -0.57 s",
    },
    ("race_gain1", "2000"): {
        "resnet18": "1.017x [0.996, 1.028] | 1.011x [1.004, 1.021] | 1: 1.053x [1.051, 1.069] | 0.962x [0.949, 0.966] | bucket_cap_mb=1, 103 (49), 0.10 s; optimal, 37 (15), 0.18 s; optimal, 51 (29), 0.06 s",
    },
    ("race_any", "2000"): {
        "resnet18": "1.055x [0.970, 1.058] | 1.048x [0.954, 1.048] | 1: 1.070x [1.061, 1.073] | 0.986x [0.915, 0.987] | stock, 49 (20), 0.48 s; optimal, 103 (81), -0.77 s; bucket_cap_mb=1, 71 (47), -0.23 s",
    },
    ("race2", "2000"): {
        "resnet18": "1.049x [1.047, 1.064] | 1.053x [1.031, 1.060] | 1: 1.062x [1.056, 1.074] | 0.991x [0.986, 0.993] | optimal, 117 (95), -0.97 s; optimal, 117 (95), -0.69 s; optimal, 81 (59), -0.18 s",
        "densenet121": "1.210x [1.198, 1.263] | 1.156x [1.153, 1.277] | 1: 1.258x [1.214, 1.265] | 0.987x [0.962, 0.998] | bucket_cap_mb=1, 113 (91), -3.04 s; bucket_cap_mb=1, 105 (83), -2.80 s; bucket_cap_mb=1, 133 (111), -4.39 s",
    },
    ("race2", "500"): {
        "bert_small": "1.211x [1.207, 1.212] | 1.174x [1.173, 1.177] | 1: 1.232x [1.225, 1.234] | 0.982x [0.979, 0.988] | optimal, 117 (95), -9.42 s; optimal, 117 (95), -10.44 s; optimal, 117 (95), -11.51 s",
    },
    ("clear", "500"): {
        "bert_small": "1.181x [1.143, 1.240] | 1.145x [1.099, 1.157] | 1: 1.193x [1.173, 1.222] | 0.966x [0.958, 1.057] | optimal, 105 (89), -7.00 s; optimal, 169 (147), -7.02 s; optimal, 169 (147), -22.69 s",
    },
    ("race3", "2000"): {
        "resnet18": "1.185x [1.152, 1.213] | 1.171x [1.153, 1.206] | 1: 1.197x [1.151, 1.244] | 0.975x [0.962, 1.029] | optimal, 65 (49), -1.14 s; bucket_cap_mb=5, 65 (43), 0.31 s; bucket_cap_mb=5, 133 (111), -1.37 s",
    },
    ("seq2seq", "2000"): {
        "seq2seq": "1.099x [1.024, 1.176] | 1.058x [1.025, 1.156] | 1: 1.120x [1.108, 1.180] | 0.992x [0.915, 0.996] | bucket_cap_mb=5, 165 (81), 0.04 s; optimal, 89 (69), -0.54 s; optimal, 109 (75), -0.18 s",
    },
    ("race", "500"): {
        "tied_lm": "1.114x [1.107, 1.116] | 1.097x [1.094, 1.101] | 1: 1.111x [1.100, 1.113] | 1.002x [0.997, 1.013] | bucket_cap_mb=1, 67 (45), -1.21 s; bucket_cap_mb=1, 67 (45), -1.03 s; optimal, 51 (29), -0.66 s",
    },
}


@pytest.mark.parametrize("where", sorted(PAIRED))
def test_the_paired_runs_make_their_rows_in_benchmarks_md(where):
    folder, rate = where
    out = _report(folder, rate, ",".join(PAIRED[where]))
    bench = (ROOT / "BENCHMARKS.md").read_text()
    for model, cells in PAIRED[where].items():
        assert f"| {model} | 3 |" in out and f"| {cells} |" in out, (model, out)
        # BENCHMARKS.md bolds the tuned ratio (the first cell) and names the cap in its header
        first, rest = cells.split(" | ", 1)
        tuned, spread = first.split(" ", 1)
        row = f"| **{tuned}** {spread} | {rest.replace('1: ', '')} |"
        assert row in bench, (model, row)


@pytest.mark.parametrize("name", ["tied_lm", "mixed_mlp", "gated_experts", "lstm_lm", "seq2seq"])
def test_the_custom_models_build_by_import_path_and_train(name, monkeypatch):
    from commsched.models.source import build

    monkeypatch.chdir(ROOT)
    built = build(f"benchmarks.custom_models:{name}", batch_size=2)
    loss = built.loss_fn(built.model(*built.inputs))
    loss.backward()
    grads = [p.grad is not None for p in built.model.parameters()]
    assert loss.dim() == 0 and any(grads)
    if name == "gated_experts":
        assert not all(grads)  # one expert a step: the others got no gradient (find_unused_parameters)


def test_paired_repeats_are_ratios_within_each_repeat():
    """With --repeats N every repeat ran each variant once: the table's ratios are taken within a
    repeat (stock over the variant), not between the variants' medians."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.tune_emulated import summarise

    def runs(*first):  # 200 steps of `first` s each, then 100 of 0.3 s
        return [[f] * 200 + [0.3] * 100 for f in first]

    doc = {
        "totals_s": {"stock": [100.0, 120.0, 110.0], "tuned": [101.0, 118.0, 112.0], "cap1": [95.0, 125.0, 100.0]},
        "steps_s": {"stock": runs(0.2, 0.2, 0.4), "tuned": runs(0.25, 0.2, 0.2), "cap1": runs(0.2, 0.2, 0.2)},
        "tuning": [{"decision": "stock", "steps_to_decide": 11, "cost_s": 0.3}] * 3,
    }
    row = summarise(doc)
    tuned = row["paired"]["tuned"]
    assert tuned["values"] == pytest.approx([100 / 101, 120 / 118, 110 / 112])
    assert tuned["median"] == pytest.approx(100 / 101) and tuned["min"] == pytest.approx(110 / 112) and tuned["max"] == pytest.approx(120 / 118)
    # not the ratio of the medians (110 / 112 for tuned; 110 / 100 for cap1 against its paired 100 / 95)
    assert row["best_cap"] == 1 and row["paired"]["cap1"]["median"] == pytest.approx(100 / 95)
    assert row["tuned_vs_best_cap"]["values"] == pytest.approx([95 / 101, 125 / 118, 100 / 112])
    assert row["paired_first"]["values"] == pytest.approx([0.8, 1.0, 2.0])  # the first 200 steps' sums, per repeat
    assert row["repeats"] == 3 and len(row["tuning_runs"]) == 3
    single = summarise({**doc, "totals_s": {k: v[:1] for k, v in doc["totals_s"].items()}, "tuning": doc["tuning"][:1]})
    assert "paired" not in single
