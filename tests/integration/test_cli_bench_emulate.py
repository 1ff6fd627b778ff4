"""The commands that were argparse mains inside library modules (issue 32, item 4): ``emulate``,
``bench-comm`` and ``bench-resources`` are click commands of the one CLI, with their options,
defaults and behaviour: emulate's ``-- ARGS`` passthrough and its exit code, one error line and exit
code 2 on bad input, and under torchrun one line from rank 0 only. No root, GPU or process group
needed: the library calls are replaced where a test would start them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from commsched.cli.main import cli, main

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def run_cli(*args: str) -> tuple[int, str, str]:
    """``commsched ARGS`` in-process: (exit code, stdout, stderr)."""
    with CliRunner().isolation() as (out, err, _):
        code = main(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


def test_every_command_is_registered_and_has_help():
    names = set(cli.commands)
    assert names == {"profile", "plan", "scale", "validate", "layers", "report", "nccl-tuner", "presets", "bench-comm", "bench-resources", "emulate"}
    for name in names:
        code, out, err = run_cli(name, "--help")
        assert code == 0 and f"Usage: commsched {name}" in out and err == "", (name, err)


# --- emulate ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_cluster(monkeypatch):
    """run_on_cluster replaced: records what it got, returns the ranks' exit codes it is told."""
    import commsched.runtime.emulate as emulate

    calls: list[dict] = []
    state = {"codes": [0, 0]}

    def fake(spec, argv, env=None, timeout_s=None, *, master_port=29555, grace_s=5.0, stream=None):
        calls.append({"spec": spec, "argv": argv, "timeout_s": timeout_s, "master_port": master_port, "to_stderr": stream is sys.stderr})
        if state["codes"] == "interrupt":  # Ctrl-C while the ranks run
            raise KeyboardInterrupt
        return [subprocess.CompletedProcess(["x"], c, "", "") for c in state["codes"]]

    monkeypatch.setattr(emulate, "run_on_cluster", fake)
    return calls, state


def test_emulate_hands_everything_after_the_double_dash_to_the_job_untouched(fake_cluster):
    calls, _ = fake_cluster
    job = ["-m", "commsched", "validate", "--model", "densenet201", "--help", "--", "-x"]
    code, out, err = run_cli("emulate", "--nodes", "2", "--rate-mbit", "500", "--", *job)
    assert code == 0, err
    (call,) = calls
    assert call["argv"] == job  # its own --help and -- belong to the job
    assert call["timeout_s"] == 0.0  # no limit by default: validate at 500 Mbit/s runs for tens of minutes
    assert call["master_port"] == 29555 and call["to_stderr"]  # the ranks' lines, [node i] first, as they come
    spec = call["spec"]
    assert (spec.nodes, spec.rate_mbit, spec.prefix, spec.subnet, spec.pin_cores) == (2, 500.0, "cs", "10.77.0", True)
    code, _, err = run_cli("emulate", "--nodes", "3", "--rate-mbit", "100", "--prefix", "abc", "--subnet", "10.9.8",
                           "--master-port", "30000", "--timeout-s", "60", "--no-pin", "--", "job.py")
    assert code == 0, err
    spec = calls[-1]["spec"]
    assert (spec.nodes, spec.prefix, spec.subnet, spec.pin_cores) == (3, "abc", "10.9.8", False)
    assert calls[-1]["timeout_s"] == 60.0 and calls[-1]["master_port"] == 30000 and calls[-1]["argv"] == ["job.py"]


@pytest.mark.parametrize("codes, want", [([0, 1], 1), ([3, 1], 3), ([0, -9], 137), ("interrupt", 130)])
def test_emulate_exits_with_its_ranks_code(fake_cluster, codes, want):
    _, state = fake_cluster
    state["codes"] = codes
    code, _, err = run_cli("emulate", "--nodes", "2", "--rate-mbit", "100", "--", "job.py")
    assert code == want, err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--nodes", "2", "--rate-mbit", "100"], "nothing to run"),
        (["--nodes", "2", "--rate-mbit", "100", "job.py"], "unexpected extra argument"),  # the job goes after --
        (["--rate-mbit", "100", "--", "job.py"], "--nodes"),
        (["--nodes", "1", "--rate-mbit", "100", "--", "job.py"], "from 2 to 16, got 1"),
        (["--nodes", "2", "--rate-mbit", "0", "--", "job.py"], "rate_mbit"),
        (["--nodes", "2", "--rate-mbit", "100", "--timeout-s", "-1", "--", "job.py"], "--timeout-s must be >= 0"),
        (["--nodes", "2", "--rate-mbit", "fast", "--", "job.py"], "--rate-mbit"),
    ],
)
def test_emulate_refuses_bad_input_in_one_line(fake_cluster, args, needle):
    calls, _ = fake_cluster
    code, out, err = run_cli("emulate", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commsched: error: ") and needle in err, err
    assert calls == []


def test_emulate_help_says_the_time_limit_defaults_to_none():
    code, out, _ = run_cli("emulate", "--help")
    assert code == 0 and "-- ARGS..." in out
    help_line = " ".join(out.split("--timeout-s", 1)[1].split())
    assert "default 0: no limit" in help_line


# --- bench-comm and bench-resources --------------------------------------------------------------


def _without_torchrun(monkeypatch):
    for k in TORCHRUN:
        monkeypatch.delenv(k, raising=False)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--max-mb", "0"], "--max-mb must be > 0"),
        (["--max-mb", "inf"], "--max-mb must be a finite number"),
        (["--max-mb", "1e-9"], "below one 4-byte element"),
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0"),
        (["--warmup", "-1"], "--warmup must be an integer >= 0, got -1"),
        (["--repeats", "1" + "0" * 400], "--repeats must be at most"),
        ([], "run under torchrun"),
    ],
)
def test_bench_comm_refuses_bad_input_in_one_line_from_rank_0_only(tmp_path, monkeypatch, args, needle):
    _without_torchrun(monkeypatch)
    code, out, err = run_cli("bench-comm", "--out", str(tmp_path / "c.json"), *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commsched: error: ") and needle in err, err
    monkeypatch.setenv("RANK", "1")  # another rank of the same job: the same refusal, said once by rank 0
    code, out, err = run_cli("bench-comm", "--out", str(tmp_path / "c.json"), *args)
    assert (code, out, err) == (2, "", "")
    assert not (tmp_path / "c.json").exists()


def test_bench_comm_writes_on_rank_0_what_the_library_measured(tmp_path, monkeypatch):
    """The command writes the cluster (with the fit and the samples), the samples, and prints the
    table of both fits; another rank writes and prints nothing."""
    import json

    import commsched.runtime.bench_comm as bench
    from commsched.cost.models import Piecewise
    from commsched.formats.io import load_cluster

    sizes = bench.default_sizes(64 << 20)
    true = Piecewise(5e-6, 2e-4, 1e-9, 1e-4, 65_536)
    samples = bench.CommSamples("gloo", 2, sizes, tuple(true.time_s(s) for s in sizes), tuple(true.time_s(s) * 0.9 for s in sizes),
                                tuple(true.time_s(s) * 1.1 for s in sizes))
    got: dict = {}

    def fake(max_bytes, *, warmup, repeats, name, progress):
        got.update(max_bytes=max_bytes, warmup=warmup, repeats=repeats, name=name, progress=progress)
        cluster, report = bench.fit_cluster(samples, name=name)
        return samples, cluster, report

    monkeypatch.setattr(bench, "measure_cluster", fake)
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}.items():
        monkeypatch.setenv(k, v)
    out, raw = tmp_path / "c.json", tmp_path / "s.json"
    code, stdout, err = run_cli("bench-comm", "--out", str(out), "--samples", str(raw), "--max-mb", "64", "--name", "lab", "--no-progress")
    assert code == 0, err
    assert got == {"max_bytes": 64 << 20, "warmup": 3, "repeats": 11, "name": "lab", "progress": False}
    doc = json.loads(out.read_text())
    assert doc["samples"] == samples.to_json() == json.loads(raw.read_text()) and doc["fit"]["chosen"] == "piecewise"
    assert load_cluster(out).name == "lab"
    assert "alpha-beta: alpha=" in stdout and "piecewise:  threshold=64 KiB" in stdout and "chosen: piecewise" in stdout
    assert stdout.rstrip().endswith(f"wrote {out} and {raw}")

    monkeypatch.setattr(bench, "measure_cluster", lambda *a, **k: None)  # what the other ranks get
    out.unlink()
    code, stdout, err = run_cli("bench-comm", "--out", str(out))
    assert (code, stdout, err) == (0, "", "") and not out.exists()


def test_bench_resources_takes_sample_files_only_with_fit(tmp_path, monkeypatch):
    _without_torchrun(monkeypatch)
    code, out, err = run_cli("bench-resources", "--out", str(tmp_path / "c.json"), "a.json", "b.json")
    assert code == 2 and err.count("\n") == 1 and "go with --fit" in err, err
    code, out, err = run_cli("bench-resources", "--fit", "--out", str(tmp_path / "c.json"))
    assert code == 2 and err.count("\n") == 1 and "--fit needs the sample files" in err, err
    code, out, err = run_cli("bench-resources", "--fit", str(tmp_path / "missing.json"), "--out", str(tmp_path / "c.json"))
    assert code == 2 and err.count("\n") == 1 and "missing.json" in err, err
    monkeypatch.setenv("RANK", "1")
    code, out, err = run_cli("bench-resources", "--fit", str(tmp_path / "missing.json"), "--out", str(tmp_path / "c.json"))
    assert (code, out, err) == (2, "", "")
    assert not (tmp_path / "c.json").exists()
