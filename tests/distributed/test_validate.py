"""`commsched validate` end to end under torchrun with two gloo ranks (small model, few steps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from commsched.runtime.validate import MID_PASS_BUCKETS, probe_sizes
from tests.distributed.launch import free_port


def _validate(*args: str, ranks: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """``commsched validate ARGS`` under torchrun with ``ranks`` gloo ranks."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", f"--master_port={free_port()}",
         "-m", "commsched", "validate", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )



def test_validate_end_to_end(tmp_path):
    out = tmp_path / "v"
    r = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
            "-m", "commsched", "validate", "--model", "resnet18", "--batch-size", "4", "--image-size", "32",
            "--strategy", "optimal,ddp,synceasgd", "--rounds", "2", "--steps", "1", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    errors = [line for line in r.stderr.splitlines() if "commsched: error" in line]  # rank 0's, not only the tail
    assert r.returncode == 0, "\n".join(errors) + "\n" + r.stderr[-3000:]
    assert "prediction error: median" in r.stdout and "torch-ddp" in r.stdout
    doc = json.loads((out / "validate.json").read_text())
    assert set(doc["strategies"]) == {"optimal", "ddp", "synceasgd"} and doc["world_size"] == 2
    # written after every round (partial), then whole; the memory each rank held after each round
    assert doc["schema"] == "commsched.validate/v1" and doc["partial"] is False and doc["rounds_done"] == 2
    assert not (out / "validate.json.tmp").exists()
    # optimal's row is the optimum planned before the rounds; what to run is the recommendation
    rec = doc["recommended"]
    assert rec["strategy"] in {"optimal", "ddp", "synceasgd"} and isinstance(rec["stock_kept"], bool) and rec["reason"]
    assert "recommended before the run" in " ".join(r.stdout.split())
    mem = doc["memory"]
    assert [len(r) for r in mem["rss_after_round_bytes"]] == [2, 2] and all(p > 0 for p in mem["peak_rss_bytes"])
    assert mem["estimate"]["model_copies"] == 7 + 4 and mem["estimate"]["variants"] == 4 and mem["ranks_per_machine"] == 2
    for row in [*doc["strategies"].values(), doc["stock_ddp"]]:
        assert row["measured_s"] > 0 and row["iteration_s"] > 0 and row["buckets"] >= 1
        assert abs(row["error"] - (row["iteration_s"] / row["measured_s"] - 1)) < 1e-12
        lo, hi = row["error_ci95"]
        assert lo <= hi
        # paired by round: one error per round (2), their median, an interval around it
        assert len(row["error_per_round"]) == 2 and row["error_paired"] == pytest.approx(sum(row["error_per_round"]) / 2)
        lo, hi = row["error_paired_ci95"]
        assert lo <= row["error_paired"] <= hi
        lo, hi = row["speedup_ci95"]
        assert 0 < lo <= hi
    for row in doc["strategies"].values():
        assert abs(row["error_before_run"] - (row["predicted_before_run_s"] / row["measured_s"] - 1)) < 1e-12
    # the semantics of the runtime that ran the plans: gloo's worker threads, measured contention
    sem = doc["semantics"]
    assert sem["backend"] == "gloo" and sem["threads"] == doc["contention"]["threads"] == 2
    assert 0 <= sem["concurrency_gain"] <= 1 and sem["comm_slowdown"] == 0
    # each probe's pass of stock DDP with one bucket per gradient (unrecorded): its last gradient,
    # then every all-reduce and the copies back, then buckets launched while compute had work left
    # and its pass with DDP's caps at 1 / MID_PASS_BUCKETS of the bytes (resnet18: 7 buckets of
    # MiBs, against the first pass's median of 2 KiB), which with the first gives the launch ratio at two sizes
    for p in doc["raw"]["probes"]:
        u, end, n = p["launch_pass"]
        assert 0 < u < end and n == 61
        u, end, n = p["launch_pass_mid"]
        assert 0 < u < end and 2 <= n + 1 <= MID_PASS_BUCKETS + 1  # buckets of the cap, then what is left
    points = sem["launch_factor_points"]
    assert len(points) == 2 and points[0][0] < points[1][0] and sem["call_overhead_s"] == 0
    # the profile steps' finalize time (DDP copying the gradients back) is in the profile's optimizer_s
    finalize = doc["raw"]["profile_steps"]["finalize_s"]
    assert len(finalize) == len(doc["raw"]["profile_steps"]["optimizer_s"]) and min(finalize) >= 0
    # one light step (recorder paused) before each variant's steps in each round: the backward
    # pass the profile is scaled to, and the speed each variant's prediction is paired with
    light = doc["raw"]["profile_steps"]["backward_unrecorded_s"]
    assert len(light) == 2 * 4 and min(light) > 0
    before = doc["raw"]["profile_steps"]["light_before"]
    assert set(before) == {"optimal", "ddp", "synceasgd", "torch-ddp"} and sorted(sum(before.values(), [])) == list(range(8))
    sizes = [b for b, _ in sem["under_compute"]]
    assert sizes == sorted(sizes) and set(map(str, sizes)) <= set(doc["contention"]["allreduce_per_call_s"])
    # PROBE_SIZES and the largest bucket a plan can have (all of resnet18's 44.6 MiB of gradients)
    assert set(sizes) <= {16384, 131072, 1048576, 8388608, doc["profile"]["bytes"]} and all(f > 0 for _, f in sem["under_compute"])
    assert set(doc["contention"]["allreduce_per_call_s"]) == {str(s) for s in probe_sizes(-(-doc["profile"]["bytes"] // 4) * 4)}
    # the semantics file written beside it plans this job again
    assert json.loads((out / "semantics.json").read_text()) == sem
    # predictions come from the profile steps and probes inside the rounds (one probe per round on
    # each rank), plans from those measured before them (4 probes on each rank)
    assert doc["contention"]["samples"] == 2 * 2 and doc["contention_before_run"]["samples"] == 2 * 4
    assert doc["profile"]["tensors"] == doc["profile_before_run"]["tensors"] == 62
    # optimal is planned for the semantics measured before the run, and says so in its params
    params = doc["plans"]["optimal"]["params"]
    assert params["semantics"] == doc["semantics_before_run"] == params["scored_under"]
    assert [len(b["tensors"]) for b in doc["plans"]["synceasgd"]["buckets"]] == [62]
    # each plan carries the prediction it was made for: under the semantics measured before the run
    for name, row in doc["strategies"].items():
        assert abs(doc["plans"][name]["predicted"]["iteration_s"] - row["predicted_before_run_s"]) <= 1e-12 * row["predicted_before_run_s"]
    # predictions use the per-call times of all-reduces launched back to back, as a table
    assert doc["comm_samples"]["statistic"] == "median" and doc["comm_samples"]["sizes_bytes"][-1] >= doc["profile"]["bytes"]
    assert doc["cluster"]["allreduce"]["model"] == "table" and "back to back" in doc["cluster"]["source"]
    assert doc["contention"]["compute_slowdown"] >= 0 and doc["contention"]["under_compute"] == sem["under_compute"]
    assert "ddp_caps_vs_stock_ddp" in doc
    # every variant's timeline was recorded from stock DDP steps
    for row in doc["strategies"].values():
        assert row["timeline"]["measured"]["allreduce_end_s"] > 0
    b = doc["measured_breakdown"]
    assert min(b.values()) >= 0
    for name in ("validate.png", "measured-gantt.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    trace = json.loads((out / "measured-trace.json").read_text())
    assert any(e.get("cat") == "allreduce" for e in trace["traceEvents"])
    # the report keeps what its predictions were made from: made again, they are the same
    from commsched.formats.io import profile_from_json
    from commsched.runtime.validate import repredict

    again = repredict(doc, profile_from_json(json.loads((out / "profile.json").read_text())), resamples=200)
    assert again["semantics"] == sem
    for name, row in [*doc["strategies"].items(), ("stock", doc["stock_ddp"])]:
        new = again["stock_ddp"] if name == "stock" else again["strategies"][name]
        assert new["iteration_s"] == row["iteration_s"] and new["error_ci95"] == row["error_ci95"], name
        assert new["error_per_round"] == row["error_per_round"] and new["error_paired_ci95"] == row["error_paired_ci95"], name
        assert new["speedup_vs_stock_ddp"] == row["speedup_vs_stock_ddp"] and new["timeline"] == row["timeline"]


def test_a_run_that_cannot_fit_says_so_before_it_starts(tmp_path):
    """resnet18 at batch 8192 of 224 px keeps about 240 GiB of activations per rank: refused on every
    rank, in one line naming the numbers, before the inputs are made (4.6 GiB of them)."""
    r = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}",
            "-m", "commsched", "validate", "--model", "resnet18", "--batch-size", "8192", "--image-size", "224",
            "--strategy", "ddp", "--out", str(tmp_path / "v"),
        ],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    errors = [line for line in r.stderr.splitlines() if "commsched: error" in line]
    assert r.returncode != 0 and len(errors) == 2, r.stderr[-3000:]  # one line from each rank
    assert all("validate would need about" in e and "GiB available" in e and "activations of resnet18 at batch 8192" in e for e in errors)
    assert not (tmp_path / "v").exists()  # nothing measured, nothing written


def test_validate_outside_torchrun_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    r = subprocess.run([sys.executable, "-m", "commsched", "validate"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "torchrun" in r.stderr


def test_chains_time_all_reduces_per_call_as_ddp_launches_them():
    from tests.distributed.launch import results, run_workers

    docs = results(run_workers("runtime_bench.py", []))
    assert docs[0] == docs[1]  # the ranks combine their numbers, so all hold the same
    d = docs[0]
    assert d["statistic"] == "median" and d["backend"] == "gloo" and d["world_size"] == 2
    assert d["threads"] == 2 and not d["fallback"]  # ProcessGroupGloo's default threads, read from the group
    assert d["sizes_bytes"] == [4, 64, 4096, 64 << 20] and d["chains"] == [8, 8, 8, 1]
    assert all(0 <= lo <= t <= hi and t > 0 for lo, t, hi in zip(d["min_s"], d["time_s"], d["max_s"])), d
    # 64 MiB takes longer than 4 B, even when 4 B waits for a scheduler tick (up to ~8 ms here)
    assert d["time_s"][-1] > d["time_s"][0]


def test_validate_takes_a_model_by_import_path(tmp_path):
    """A factory's model whose example inputs are by keyword (a dict, as Hugging Face models take them)."""
    out = tmp_path / "v"
    r = _validate("--model", "tests.distributed.factories:tiny_tied_lm", "--batch-size", "4", "--strategy", "optimal,wfbp",
                  "--rounds", "1", "--steps", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "validate.json").read_text())
    assert doc["model"] == "tests.distributed.factories:tiny_tied_lm" and set(doc["strategies"]) == {"optimal", "wfbp"}
    # the tied weight is one parameter: three gradients in all (embedding/head, mix.weight, mix.bias)
    assert doc["strategies"]["wfbp"]["buckets"] == 3


def test_validate_trains_a_model_whose_loss_uses_its_parameters_and_that_deepcopy_cannot_copy(tmp_path):
    """CLIP's shape: the loss applies the model's temperature (validate's copies reached the
    original's, and DDP stopped with "Expected to have finished reduction"), a lazy tower (its
    memory phase failed on uninitialised parameters) and a lock (deepcopy failed)."""
    out = tmp_path / "v"
    r = _validate("--model", "tests.distributed.factories:clip_like", "--batch-size", "4", "--strategy", "wfbp",
                  "--rounds", "1", "--steps", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "validate.json").read_text())
    # a bucket per gradient: both towers' weights and biases (4 + 1 + 2) and the temperature
    assert doc["strategies"]["wfbp"]["buckets"] == 8


def test_a_users_error_at_any_step_of_validate_is_one_line_on_every_rank(tmp_path):
    r = _validate("--model", "tests.distributed.factories:fails_later", "--batch-size", "4", "--strategy", "wfbp",
                  "--rounds", "1", "--steps", "1", "--out", str(tmp_path / "v"), timeout=300)
    errors = [line for line in r.stderr.splitlines() if "commsched: error" in line]
    assert r.returncode != 0 and len(errors) == 2, r.stderr[-3000:]
    assert all("model 'tests.distributed.factories:fails_later' failed during validate: ValueError: labels exhausted (at " in e
               and "factories.py:" in e for e in errors)
    assert "]: Traceback" not in r.stderr  # no rank's ("[rank0]: Traceback ..."); torchrun's own report aside


def test_validate_names_a_factory_that_returns_the_wrong_thing(tmp_path):
    r = _validate("--model", "tests.distributed.factories:not_a_triple", "--out", str(tmp_path / "v"), ranks=1, timeout=300)
    assert r.returncode != 0
    assert "must return (model, example_inputs, loss_fn)" in r.stderr


def test_validate_names_parameters_its_ddp_cannot_reduce_before_it_measures(tmp_path):
    """A factory whose model has a parameter no step uses: one line naming it on each rank, before
    the rounds (validate runs DDP without find_unused_parameters); the factory takes no batch size,
    so the run says it is of the factory's own batch, not --batch-size's."""
    r = _validate("--model", "tests.distributed.factories:with_unused", "--batch-size", "64", "--strategy", "wfbp",
                  "--rounds", "1", "--steps", "1", "--out", str(tmp_path / "v"), timeout=300)
    errors = [line for line in r.stderr.splitlines() if "commsched: error" in line]
    assert r.returncode != 0 and len(errors) == 2, r.stderr[-3000:]
    assert all("2 trainable parameter(s)" in e and "spare.weight, spare.bias" in e and "find_unused_parameters" in e for e in errors)
    said = " ".join(r.stderr.split())  # the progress console wraps its lines
    assert "takes no batch_size: the run is of its own inputs (batch 4, its first input's leading dimension), not --batch-size 64" in said
    assert "1 round(s)" in r.stderr and "2/5" not in r.stderr  # the smoke-test note; stopped in the profile phase
    assert not (tmp_path / "v").exists()
