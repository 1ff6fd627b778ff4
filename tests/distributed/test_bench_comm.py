"""`commsched bench-comm` end to end: torchrun, 2 gloo ranks over loopback, a cluster file that loads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from commsched.cost.models import AlphaBeta, Piecewise
from commsched.errors import CommschedError
from commsched.formats.io import load_cluster
from commsched.runtime.bench_comm import CommSamples, bench_allreduce, default_sizes, fit_cluster

jsonschema = pytest.importorskip("jsonschema")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str, nproc: int = 2, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
        "-m", "commsched", "bench-comm", *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def test_two_gloo_ranks_write_a_loadable_cluster(tmp_path):
    out, samples_path = tmp_path / "cluster.json", tmp_path / "samples.json"
    # up to 32 MiB: at 4 MiB a loopback all-reduce (about 3 ms) was once faster than a 4 B one that
    # waited for a scheduler wake-up (3.8 ms), which made the size check below flaky
    r = _torchrun("--out", str(out), "--samples", str(samples_path), "--max-mb", "32", "--repeats", "3", "--no-progress")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]

    cluster = load_cluster(out)
    assert cluster.workers == 2
    assert isinstance(cluster.allreduce, (AlphaBeta, Piecewise))
    assert "gloo" in cluster.source

    doc = json.loads(out.read_text())
    schema = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cluster.v1.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)  # the extra "fit" and "samples" keys are allowed

    samples = doc["samples"]
    assert json.loads(samples_path.read_text()) == samples
    assert samples["backend"] == "gloo" and samples["world_size"] == 2
    sizes, med = samples["sizes_bytes"], samples["time_s"]
    assert sizes[0] == 4 and sizes[-1] == 32 << 20 and sizes == sorted(sizes)
    assert all(lo <= m <= hi for lo, m, hi in zip(samples["min_s"], med, samples["max_s"]))
    assert med[-1] > med[0]  # 32 MiB takes longer than 4 B

    fit = doc["fit"]
    assert fit["chosen"] in ("alpha_beta", "piecewise") and fit["criterion"] == "max_abs_rel_error"
    assert fit[fit["chosen"]]["allreduce"] == doc["allreduce"]
    for kind in ("alpha_beta", "piecewise"):
        assert len(fit[kind]["residuals_s"]) == len(sizes)
        assert fit[kind]["rmse_s"] >= 0
    # The documented rule: piecewise only when it predicts > 0 at every measured size and its worst
    # relative error is strictly smaller; alpha-beta otherwise.
    pw, ab = fit["piecewise"], fit["alpha_beta"]
    expect = "piecewise" if pw["positive_at_samples"] and pw["max_abs_rel_error"] < ab["max_abs_rel_error"] else "alpha_beta"
    assert fit["chosen"] == expect

    assert "alpha-beta: alpha=" in r.stdout and "chosen:" in r.stdout


def test_without_torchrun_it_is_a_one_line_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    r = subprocess.run(
        [sys.executable, "-m", "commsched", "bench-comm", "--out", str(tmp_path / "c.json")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "torchrun" in r.stderr
    assert not (tmp_path / "c.json").exists()


def test_under_torchrun_a_bad_option_is_one_line_from_rank_0(tmp_path):
    """Every rank meets the same bad option: rank 0 says so, the others exit 2 without a word."""
    r = _torchrun("--out", str(tmp_path / "c.json"), "--repeats", "0")
    assert r.returncode != 0
    assert r.stderr.count("commsched: error: --repeats must be an integer >= 1, got 0") == 1, r.stderr[-3000:]
    assert not (tmp_path / "c.json").exists()


# --- in-process parts: no process group needed ----------------------------------------------------


def test_default_sizes_are_dense_then_powers_of_four():
    sizes = default_sizes()
    assert sizes[:3] == (4, 8, 16) and sizes[-5:] == (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)
    assert len(sizes) == 23 and sizes[-1] == 256 << 20
    assert default_sizes(4 << 20)[-2:] == (1 << 20, 4 << 20)
    assert default_sizes(3 << 20)[-2:] == (1 << 20, 3 << 20)  # an off-grid maximum ends the list
    assert default_sizes(64, min_bytes=8) == (8, 16, 32, 64)
    with pytest.raises(CommschedError, match="max_bytes"):
        default_sizes(2)


def test_bench_allreduce_needs_a_process_group():
    with pytest.raises(CommschedError, match="initialized torch.distributed process group"):
        bench_allreduce([4, 8])


def _samples(times: list[float], sizes: list[int]) -> CommSamples:
    return CommSamples("gloo", 4, tuple(sizes), tuple(times), tuple(t * 0.9 for t in times), tuple(t * 1.1 for t in times))


def test_fit_cluster_prefers_piecewise_on_piecewise_data():
    true = Piecewise(5e-6, 2e-4, 1e-9, 1e-4, 65_536)
    sizes = default_sizes(64 << 20)
    cluster, report = fit_cluster(_samples([true.time_s(s) for s in sizes], list(sizes)), name="lab")
    assert cluster.name == "lab" and cluster.workers == 4
    assert report["chosen"] == "piecewise" and isinstance(cluster.allreduce, Piecewise)
    assert cluster.allreduce.threshold_bytes == 65_536
    assert report["piecewise"]["max_abs_rel_error"] < 1e-6 < report["alpha_beta"]["max_abs_rel_error"]
    assert "gloo" in cluster.source and "4 ranks" in cluster.source


def test_a_fit_that_describes_the_samples_poorly_is_said_so():
    """Good data: no warning. Times that do not grow with the size (noise on a loaded machine, sizes
    up to 1 MiB only) fit a cost no dearer at 1 MiB than at 4 B, far off at some sizes: both are said."""
    from commsched.cli.bench import _comm_summary

    true = Piecewise(5e-6, 2e-4, 1e-9, 1e-4, 65_536)
    sizes = list(default_sizes(64 << 20))
    assert fit_cluster(_samples([true.time_s(s) for s in sizes], sizes))[1]["warnings"] == []
    sizes = list(default_sizes(1 << 20))
    noisy = [3.7e-4 if i % 3 else 2.6e-3 for i in range(len(sizes) - 1)] + [1.0e-3]
    samples = _samples(noisy, sizes)
    cluster, report = fit_cluster(samples)
    words = " | ".join(report["warnings"])
    assert "time does not grow from 4 B to 1 MiB" in words and "off at some measured size" in words, words
    assert cluster.allreduce.time_s(1 << 20) <= cluster.allreduce.time_s(4)
    assert _comm_summary(samples, report).count("\nwarning: ") == 2


def test_fit_cluster_falls_back_to_alpha_beta_with_few_sizes():
    cluster, report = fit_cluster(_samples([1e-4, 2e-4, 4e-4], [4, 1 << 20, 2 << 20]))
    assert report["chosen"] == "alpha_beta" and isinstance(cluster.allreduce, AlphaBeta)
    assert "four or more distinct sizes" in report["piecewise"]["error"]


def test_comm_samples_validate_and_round_trip():
    s = _samples([1e-4, 2e-4], [4, 8])
    assert CommSamples.from_json(json.loads(json.dumps(s.to_json()))) == s
    with pytest.raises(CommschedError, match="one time per size"):
        CommSamples("gloo", 2, (4, 8), (1e-4,), (1e-4,), (1e-4,))
    with pytest.raises(CommschedError, match="strictly increasing"):
        CommSamples("gloo", 2, (8, 4), (1e-4, 1e-4), (1e-4, 1e-4), (1e-4, 1e-4))
    with pytest.raises(CommschedError, match="world_size"):
        CommSamples("gloo", 0, (4,), (1e-4,), (1e-4,), (1e-4,))
    with pytest.raises(CommschedError, match="time_s at 4 bytes"):
        CommSamples("gloo", 2, (4,), (float("nan"),), (1e-4,), (1e-4,))
    with pytest.raises(CommschedError, match="lack field"):
        CommSamples.from_json({"backend": "gloo"})


def test_fit_cluster_never_chooses_a_piecewise_fit_that_predicts_negative_times(monkeypatch):
    import commsched.runtime.bench_comm as bench
    from commsched.cost.fit import FitReport

    sizes = [4, 8, 16, 32, 64]
    below_zero = FitReport(Piecewise(1e-6, -1.0, 1e-9, 1e-4, 16), (0.0,) * 5, 0.0, 0.0)  # "perfect", but < 0 at 4 B
    monkeypatch.setattr(bench, "fit_piecewise_auto", lambda *_a, **_k: below_zero)
    cluster, report = fit_cluster(_samples([1e-4, 1.1e-4, 1.2e-4, 1.4e-4, 1.5e-4], sizes))
    assert report["chosen"] == "alpha_beta" and isinstance(cluster.allreduce, AlphaBeta)
    assert report["piecewise"]["positive_at_samples"] is False
