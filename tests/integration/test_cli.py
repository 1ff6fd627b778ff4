"""The command line end to end, in real subprocesses: outputs, files, golden plans and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILE = str(DATA / "tiny-profile.json")
CLUSTER = str(DATA / "tiny-cluster.json")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commsched", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_plan_json_matches_golden():
    r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = json.loads((DATA / "golden-tiny-plan.json").read_text())
    assert got["best"] == want["best"]
    assert list(got["strategies"]) == list(want["strategies"])
    for name, plan in want["strategies"].items():
        g = got["strategies"][name]
        assert g["schema"] == "commsched.plan/v1" and g["strategy"] == name
        assert [b["tensors"] for b in g["buckets"]] == [b["tensors"] for b in plan["buckets"]], name
        assert g["predicted"]["iteration_s"] == pytest.approx(plan["predicted"]["iteration_s"], rel=1e-12), name


def test_plan_writes_plan_trace_and_gantt(tmp_path):
    r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--strategy", "optimal,ddp", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "optimal" in r.stdout and "speedup vs DDP" in r.stdout
    plan = json.loads((tmp_path / "o" / "plan.json").read_text())
    assert plan["strategy"] == "optimal" and plan["predicted"]["iteration_s"] > 0
    trace = json.loads((tmp_path / "o" / "trace.json").read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in complete} >= {"forward", "backward", "allreduce"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert (tmp_path / "o" / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the stock-DDP keyword arguments for the best plan: one cap per bucket, its bytes in MiB
    opts = json.loads((tmp_path / "o" / "ddp_options.json").read_text())
    assert opts["schema"] == "commsched.ddp_options/v1" and opts["strategy"] == "optimal"
    assert opts["bucket_bytes"] == [b["bytes"] for b in plan["buckets"]]
    assert [int(c * 2**20) for c in opts["kwargs"]["bucket_cap_mb_list"]] == opts["bucket_bytes"]


def test_plan_runtime_semantics(tmp_path):
    """--runtime: gloo's threads sharing the link end where the serial run ends (no contention);
    a semantics file with contention makes every plan slower; a bad one is a one-line error."""
    def best_ms(*extra):
        r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--json", *extra)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        return {k: v["predicted"]["iteration_s"] for k, v in doc["strategies"].items()}, doc

    nccl, _ = best_ms()
    gloo, doc = best_ms("--runtime", "gloo")
    assert gloo == pytest.approx(nccl, rel=1e-9)
    assert doc["strategies"]["wfbp"]["params"]["scored_under"]["threads"] == 2
    sem = tmp_path / "semantics.json"
    sem.write_text(json.dumps({"backend": "gloo", "threads": 2, "compute_slowdown": 0.5, "comm_slowdown": 0.1, "call_overhead_s": 0.001}))
    slow, doc = best_ms("--runtime", str(sem))
    assert all(slow[k] >= nccl[k] * (1 - 1e-12) for k in nccl) and any(slow[k] > nccl[k] for k in nccl)
    assert doc["strategies"]["optimal"]["params"]["semantics"]["compute_slowdown"] == 0.5
    sem.write_text(json.dumps({"backend": "gloo", "threads": 0}))
    for bad in ("mpi", str(sem)):
        r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--runtime", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_plan_reports_the_optimum_and_recommends_stock_ddp_below_the_min_gain(tmp_path):
    """resnet50 on v100-10gbe: the optimum is predicted 0.8% faster than stock DDP's defaults, below
    the default --min-gain (3%): the optimal row is still the optimum, and the recommendation (and
    the plan written) is stock DDP's buckets, with the reason; --min-gain 0 recommends the optimum."""
    args = ("plan", "--model", "resnet50", "--cluster", "v100-10gbe", "--strategy", "ddp,optimal,horovod")
    r = run(*args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    buckets = {k: [b["tensors"] for b in v["buckets"]] for k, v in doc["strategies"].items()}
    opt, ddp = (doc["strategies"][k]["predicted"]["iteration_s"] for k in ("optimal", "ddp"))
    assert buckets["optimal"] != buckets["ddp"] and 0.97 < opt / ddp < 1.0  # the optimum, a gain under 3%
    assert doc["best"] == "optimal" and "min_gain" not in doc["strategies"]["optimal"]["params"]
    rec = doc["recommended"]
    assert rec["strategy"] == "ddp" and rec["stock_kept"] and "under the min gain of 3.0%" in rec["reason"]
    assert [b["tensors"] for b in rec["plan"]["buckets"]] == buckets["ddp"]
    r = run(*args, "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "* recommended (what to run): ddp, stock DDP's default buckets" in " ".join(r.stdout.split())
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written["strategy"] == "ddp" and [b["tensors"] for b in written["buckets"]] == buckets["ddp"]
    r = run(*args, "--json", "--min-gain", "0")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["recommended"]["strategy"] == "optimal" and not doc["recommended"]["stock_kept"]
    # without ddp among the strategies stock DDP's buckets are still recommended, and shown
    r = run("plan", "--model", "resnet50", "--cluster", "v100-10gbe", "--strategy", "optimal,horovod", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["strategies"]) == {"optimal", "horovod"} and doc["recommended"]["strategy"] == "ddp"
    assert [b["tensors"] for b in doc["recommended"]["plan"]["buckets"]] == buckets["ddp"]
    r = run("plan", "--model", "resnet50", "--cluster", "v100-10gbe", "--strategy", "optimal,horovod", "--out", str(tmp_path / "o"))
    assert r.returncode == 0 and "ddp *" in r.stdout, r.stdout
    for bad in ("1", "-0.1", "nan"):
        r = run(*args, "--min-gain", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--min-gain" in r.stderr, r.stderr


def test_min_gain_help_states_the_default():
    from commsched.cli.main import MIN_GAIN_HELP
    from commsched.planners import MIN_GAIN_OVER_DDP

    assert f"default {MIN_GAIN_OVER_DDP:g}:" in MIN_GAIN_HELP


def test_profile_then_plan_with_a_cluster_file(tmp_path):
    r = run("profile", "--model", "resnet50", "--batch-size", "32", "--device", "V100", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    prof = json.loads((tmp_path / "p.json").read_text())
    assert prof["schema"] == "commsched.profile/v1" and len(prof["tensors"]) == 161 and prof["source"] == "estimated"
    r = run("plan", "--profile", str(tmp_path / "p.json"), "--cluster", CLUSTER, "--strategy", "optimal", "--strategy", "ddp", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["strategies"]) == {"optimal", "ddp"} and doc["best"] == "optimal"
    names = [n for b in doc["strategies"]["ddp"]["buckets"] for n in b["tensors"]]
    assert names == [t["name"] for t in prof["tensors"]]


def test_plan_zoo_model_on_rescaled_preset(tmp_path):
    r = run("plan", "--model", "vgg16", "--cluster", "v100-56gbib", "--workers", "32", "--bucket-mb", "25", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "32 workers" in r.stdout and (tmp_path / "plan.json").exists()


def test_plan_dtype_halves_gradient_bytes_of_zoo_profiles(tmp_path):
    import json

    docs = {}
    for dtype in ("fp32", "fp16"):
        r = run("plan", "--model", "resnet18", "--dtype", dtype, "--strategy", "wfbp", "--json")
        assert r.returncode == 0, r.stderr
        docs[dtype] = json.loads(r.stdout)["strategies"]["wfbp"]["buckets"]
    assert [b["bytes"] for b in docs["fp16"]] == [b["bytes"] // 2 for b in docs["fp32"]]
    r = run("plan", "--profile", PROFILE, "--dtype", "fp16")
    assert r.returncode == 2 and "a profile file carries its own bytes" in r.stderr
    r = run("profile", "--model", "resnet18", "--dtype", "fp16", "--measure", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "--dtype sets the gradient bytes of estimated profiles" in r.stderr


def test_layers_ranks_vgg16s_classifier_first_and_compares_the_replacement(tmp_path):
    import json

    r = run("layers", "--model", "vgg16", "--replaced-by", "vgg16_nin", "--sweep", "8,32", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["layers"][0]["layer"] == "classifier.0" and doc["cluster"] == "osf-2080ti-25gbe"
    sf = doc["scaling_factors"]
    assert all(sf["vgg16_nin"][n] > sf["vgg16"][n] for n in ("8", "32"))
    # several models in one flag, as --strategy takes them; a misspelt one fails before the ranking
    r = run("layers", "--model", "resnet18", "--replaced-by", "vgg16_nin,vgg16", "--replaced-by", "vgg16", "--sweep", "8", "--json")
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["scaling_factors"]) == ["resnet18", "vgg16_nin", "vgg16"]
    r = run("layers", "--model", "resnet18", "--replaced-by", "vgg61")
    assert r.returncode == 2 and "unknown model 'vgg61'" in r.stderr and "re-planning" not in r.stderr
    r = run("layers", "--model", "resnet18", "--replaced-by", "vgg16,")
    assert r.returncode == 2 and "--replaced-by takes model names, one per flag or separated by commas, got 'vgg16,'" in r.stderr
    r = run("layers", "--model", "vgg16", "--cluster", "rs-2xv100s-pcie")
    assert r.returncode == 2 and "per-bucket resources" in r.stderr
    r = run("layers", "--profile", PROFILE, "--model", "vgg16")
    assert r.returncode == 2 and "--model sets a zoo profile" in r.stderr
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(json.loads((DATA / "golden-tiny-plan.json").read_text())["strategies"]["wfbp"]))
    r = run("nccl-tuner", str(plan), "--no-build", "--out", str(tmp_path / "nt"))
    assert r.returncode == 0 and "NCCL_TUNER_PLUGIN" not in r.stdout and "is not built" in r.stderr


def test_scale_writes_csv_and_png(tmp_path):
    r = run(
        "scale", "--profile", PROFILE, "--cluster", "k80-10gbe", "--workers", "4,8,...,64",
        "--algorithm", "ring,double_binary_tree", "--out", str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "scale.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 5 * 8  # algorithms x worker counts x strategies
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


def test_bare_command_prints_help():
    r = run()
    assert r.returncode == 0 and "Usage" in r.stdout and "plan" in r.stdout


def test_presets_lists_every_model_strategy_and_cluster():
    from commsched.cost.cluster import PRESETS
    from commsched.models.names import ZOO_MODELS
    from commsched.planners import STRATEGIES

    r = run("presets")
    assert r.returncode == 0, r.stderr
    for name in (*ZOO_MODELS, *STRATEGIES, *PRESETS):
        assert name in r.stdout, name


def test_strategy_options_change_the_plans():
    def plans(*extra):
        r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--json", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["strategies"]

    base = plans()
    small = plans("--bucket-mb", "0.5", "--horovod-threshold-mb", "0", "--horovod-cycle-ms", "3")
    # 512 KiB caps, the first too: [fc.bias, fc.weight] [layer2.conv.weight] [the remaining 187,648 B]
    assert len(base["ddp"]["buckets"]) == 2 and len(small["ddp"]["buckets"]) == 3
    assert small["ddp"]["params"]["cap_bytes"] == small["ddp"]["params"]["first_bucket_bytes"] == 2**19
    assert small["horovod"]["params"] == {"threshold_bytes": 0, "cycle_s": 0.003}
    assert all(len(b["tensors"]) == 1 for b in small["horovod"]["buckets"])  # threshold 0: nothing fuses


def test_scale_csv_values(tmp_path):
    """synceasgd's scaling factor is compute / (compute + T(all bytes)) with T the ring at N workers."""
    from commsched.cost.cluster import preset
    from commsched.formats.io import load_profile

    r = run("scale", "--profile", PROFILE, "--cluster", "k80-10gbe", "--workers", "2,4", "--strategy", "synceasgd", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    import csv

    rows = list(csv.DictReader((tmp_path / "scale.csv").open()))
    prof = load_profile(PROFILE)
    for row in rows:
        n = int(row["workers"])
        t = prof.compute_s + preset("k80-10gbe").with_workers(n).allreduce.time_s(prof.total_bytes)
        assert float(row["iteration_s"]) == pytest.approx(t, rel=1e-12)
        assert float(row["scaling_factor"]) == pytest.approx(prof.compute_s / t, rel=1e-12)
        assert float(row["speedup"]) == pytest.approx(n * prof.compute_s / t, rel=1e-12)


def bad_profile(tmp_path: Path, mutate) -> str:
    doc = json.loads(Path(PROFILE).read_text())
    mutate(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    return str(p)


def _set(path, value):
    def f(doc):
        obj = doc
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return f


ERRORS = {
    "missing file": (lambda t: ["plan", "--profile", str(t / "nope.json")], "no such file"),
    "malformed json": (lambda t: (t.joinpath("m.json").write_text("{bad"), ["plan", "--profile", str(t / "m.json")])[1], "malformed JSON"),
    "unknown model": (lambda t: ["plan", "--model", "resnet51"], "unknown model 'resnet51'"),
    "unknown strategy": (lambda t: ["plan", "--profile", PROFILE, "--strategy", "fastest"], "unknown strategy 'fastest'"),
    "unknown preset": (lambda t: ["plan", "--profile", PROFILE, "--cluster", "dgx-9000"], "unknown cluster preset 'dgx-9000'"),
    "unknown device": (lambda t: ["profile", "--model", "resnet18", "--device", "TPU", "--out", str(t / "p.json")], "unknown device 'TPU'"),
    "efficiency when measuring": (lambda t: ["profile", "--model", "resnet18", "--measure", "--efficiency", "0.5", "--out", str(t / "p.json")], "--efficiency sets estimated profiles"),
    "iters when estimating": (lambda t: ["profile", "--model", "resnet18", "--iters", "3", "--out", str(t / "p.json")], "--iters goes with --measure"),
    "negative size": (lambda t: ["plan", "--profile", bad_profile(t, _set(["tensors", 0, "bytes"], -4))], "bytes"),
    "zero size": (lambda t: ["plan", "--profile", bad_profile(t, _set(["tensors", 1, "bytes"], 0))], "bytes"),
    "negative time": (lambda t: ["plan", "--profile", bad_profile(t, _set(["tensors", 2, "backward_s"], -0.001))], "backward_s"),
    "negative forward": (lambda t: ["plan", "--profile", bad_profile(t, _set(["forward_s"], -1))], "forward_s"),
    "zero forward": (lambda t: ["plan", "--profile", bad_profile(t, _set(["forward_s"], 0))], "forward_s must be > 0"),
    "zero-cost cluster": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "alpha_beta", "alpha_s": 0, "beta_s_per_byte": 0}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "takes 0 s at every size",
    ),
    "zero time in a table": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "table", "points": [[4, 0], [1024, 2e-5]]}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "time of 0 s",
    ),
    "duplicate names": (lambda t: ["plan", "--profile", bad_profile(t, _set(["tensors", 3, "name"], "fc.bias"))], "twice"),
    "zero workers": (lambda t: ["plan", "--profile", PROFILE, "--workers", "0"], "--workers"),
    "zero batch": (lambda t: ["plan", "--model", "resnet18", "--batch-size", "0"], "--batch-size"),
    "zero bucket": (lambda t: ["plan", "--profile", PROFILE, "--bucket-mb", "0"], "--bucket-mb"),
    "negative alpha": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({**json.loads(Path(CLUSTER).read_text()), "allreduce": {"model": "alpha_beta", "alpha_s": -1, "beta_s_per_byte": 1e-9}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "alpha_s",
    ),
    "rescale a fitted cluster": (lambda t: ["plan", "--profile", PROFILE, "--cluster", CLUSTER, "--workers", "64"], "cannot be rescaled"),
    "bad worker series": (lambda t: ["scale", "--profile", PROFILE, "--workers", "4,8,...,100"], "not in the series"),
    "worker series that ends before it starts": (lambda t: ["scale", "--profile", PROFILE, "--workers", "4,8,...,4"], "at least 8"),
    "wrong schema": (lambda t: ["plan", "--profile", CLUSTER], "schema"),
    "a number for a profile's device": (
        lambda t: (
            t.joinpath("p.json").write_text(json.dumps({**json.loads(Path(PROFILE).read_text()), "device": 7})),
            ["plan", "--profile", str(t / "p.json")],
        )[1],
        "device must be a string, got 7",
    ),
    "null for a cluster's name": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({**json.loads(Path(CLUSTER).read_text()), "name": None})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "name must be a string, got None",
    ),
    "unknown option": (lambda t: ["plan", "--frobnicate"], "frobnicate"),
    "image too small for the model": (lambda t: ["plan", "--model", "vgg16", "--image-size", "16"], "cannot train on an input of shape 2x3x16x16"),
    "infinite cycle": (lambda t: ["plan", "--profile", PROFILE, "--horovod-cycle-ms", "inf"], "--horovod-cycle-ms"),
    "infinite bucket": (lambda t: ["plan", "--profile", PROFILE, "--bucket-mb", "inf"], "--bucket-mb"),
    "nan threshold": (lambda t: ["plan", "--profile", PROFILE, "--horovod-threshold-mb", "nan"], "--horovod-threshold-mb"),
    "null gamma": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "ring", "link_alpha_s": 1e-5, "link_beta_s_per_byte": 1e-9, "gamma_s_per_byte": None}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "gamma_s_per_byte",
    ),
    "bad table point": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "table", "points": [[4, 1e-5], [None, 2e-5]]}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "table sizes",
    ),
    "optimizer null": (lambda t: ["plan", "--profile", bad_profile(t, _set(["optimizer_s"], None))], "optimizer_s"),
    "not utf-8": (lambda t: (t.joinpath("b.json").write_bytes(b"\xff\xfe{"), ["plan", "--profile", str(t / "b.json")])[1], "UTF-8"),
    "unwritable out": (lambda t: (t.joinpath("f").write_text("x"), ["plan", "--profile", PROFILE, "--out", str(t / "f")])[1], "commsched: error"),
    "unwritable out in scale": (
        lambda t: (t.joinpath("f").write_text("x"), ["scale", "--profile", PROFILE, "--workers", "4,8", "--out", str(t / "f")])[1],
        "commsched: error",
    ),
    "unwritable out after profiling a zoo model": (
        lambda t: (t.joinpath("f").write_text("x"), ["plan", "--model", "resnet18", "--out", str(t / "f")])[1],
        "commsched: error",
    ),
    "fitted cluster in scale": (lambda t: ["scale", "--profile", PROFILE, "--cluster", CLUSTER, "--workers", "16,32"], "cannot be rescaled"),
    "400-digit size": (lambda t: ["plan", "--profile", bad_profile(t, _set(["tensors", 0, "bytes"], 10**400))], "at most 2**50 bytes"),
    "NaN alpha": (
        lambda t: (
            t.joinpath("c.json").write_text('{"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "alpha_beta", "alpha_s": NaN, "beta_s_per_byte": 1e-9}}'),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "alpha_s must be a finite number",
    ),
    "table extrapolating to free all-reduces": (
        lambda t: (
            t.joinpath("c.json").write_text(json.dumps({"schema": "commsched.cluster/v1", "workers": 8, "allreduce": {"model": "table", "points": [[4, 1e-3], [1024, 1e-4]]}})),
            ["plan", "--profile", PROFILE, "--cluster", str(t / "c.json")],
        )[1],
        "extrapolates to 0 s at about 1137 bytes",
    ),
    "device with only a profile file": (lambda t: ["plan", "--profile", PROFILE, "--device", "A100"], "--device sets a zoo profile"),
    "efficiency with only a profile file": (lambda t: ["scale", "--profile", PROFILE, "--efficiency", "0.5", "--out", str(t / "s")], "--efficiency sets a zoo profile"),
    "empty strategy": (lambda t: ["plan", "--profile", PROFILE, "--strategy", ""], "--strategy names nothing"),
    "empty algorithm": (lambda t: ["scale", "--profile", PROFILE, "--algorithm", ",", "--out", str(t / "s")], "--algorithm names nothing"),
    "sweep without replaced-by": (lambda t: ["layers", "--profile", PROFILE, "--sweep", "0,4"], "--sweep 0,4 sets the worker counts of --replaced-by's comparison"),
    "400-digit workers": (lambda t: ["plan", "--profile", PROFILE, "--workers", "1" + "0" * 400], "--workers must be at most 2**20"),
    "image size that cannot be allocated": (
        lambda t: ["profile", "--model", "resnet18", "--measure", "--batch-size", "64", "--image-size", "8192", "--out", str(t / "p.json")],
        "64x3x8192x8192 takes 48 GiB, over the bound of 2 GiB",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_are_one_line_and_exit_2(tmp_path, case):
    make_args, needle = ERRORS[case]
    r = run(*make_args(tmp_path), cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr  # not even a blank line from a progress bar
    assert "Traceback" not in r.stderr and needle in lines[0], lines[0]
    assert lines[0].startswith("commsched: error: ")


def test_plan_with_resources_on_the_rs_preset(tmp_path):
    r = run("plan", "--model", "resnet18", "--batch-size", "32", "--cluster", "rs-2xv100s-pcie",
            "--strategy", "rs-grid", "--strategy", "rs-heuristic,ddp", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    grid, heur, ddp = (doc["strategies"][k] for k in ("rs-grid", "rs-heuristic", "ddp"))
    assert all(set(b["resources"]) == {"blocks", "threads_per_block"} for b in grid["buckets"] + heur["buckets"])
    assert len({json.dumps(b["resources"]) for b in grid["buckets"]}) == 1
    assert all(b["resources"] is None for b in ddp["buckets"])
    assert heur["predicted"]["iteration_s"] < ddp["predicted"]["iteration_s"]
    table = run("plan", "--model", "resnet18", "--batch-size", "32", "--cluster", "rs-2xv100s-pcie", "--strategy", "rs-grid,rs-heuristic,ddp", "--out", str(tmp_path))
    assert table.returncode == 0, table.stderr
    assert "resources" in table.stdout and "mixed" in table.stdout and "2x256" in table.stdout
    fastest = min(doc["strategies"], key=lambda k: doc["strategies"][k]["predicted"]["iteration_s"])
    assert fastest != "ddp"  # the grid's configs beat the library default on this testbed
    assert json.loads((tmp_path / "plan.json").read_text())["strategy"] == fastest
    assert "do not apply them" in json.loads((tmp_path / "ddp_options.json").read_text())["note"]
    r = run("presets")
    assert "rs-2xv100s-pcie" in r.stdout and "rs-grid" in r.stdout and "rs-heuristic" in r.stdout


def test_resource_strategy_on_a_cluster_without_resources_is_an_error():
    r = run("plan", "--profile", PROFILE, "--cluster", CLUSTER, "--strategy", "rs-grid")
    assert r.returncode == 2 and "rs-2xv100s-pcie" in r.stderr and "Traceback" not in r.stderr


def test_scale_on_a_resource_cluster(tmp_path):
    r = run("scale", "--model", "resnet18", "--cluster", "rs-2xv100s-pcie", "--workers", "2,4", "--strategy", "ddp,optimal", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "without contention" in r.stderr and (tmp_path / "scale.csv").exists()
    r = run("scale", "--model", "resnet18", "--cluster", "rs-2xv100s-pcie", "--workers", "2", "--strategy", "joint", "--out", str(tmp_path))
    assert r.returncode == 2 and "per-bucket resources" in r.stderr and "Traceback" not in r.stderr


def test_validate_refuses_resource_strategies():
    import os

    r = subprocess.run(
        [sys.executable, "-m", "commsched", "validate", "--strategy", "rs-grid"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "RANK": "0"},
    )
    assert r.returncode == 2 and "rs-grid" in r.stderr and "NCCL" in r.stderr


def test_validate_checks_min_gain_before_any_work():
    r = run("validate", "--min-gain", "1.5")  # no torchrun: the option is checked first
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--min-gain must be a fraction in [0, 1), got 1.5" in r.stderr


def test_profile_measure_device_is_where_it_measures(tmp_path):
    out = tmp_path / "p.json"
    r = run("profile", "--model", "resnet18", "--batch-size", "2", "--image-size", "32", "--measure", "--iters", "1",
            "--warmup", "0", "--device", "cpu", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["device"] == "cpu"
    r = run("profile", "--model", "resnet18", "--measure", "--device", "V100", "--out", str(tmp_path / "q.json"))
    assert r.returncode == 2 and "'cpu', 'cuda' or 'cuda:N', got 'V100'" in r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "q.json").exists()


def test_profile_measure_on_cuda_without_a_gpu_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    r = run("profile", "--model", "resnet18", "--measure", "--device", "cuda", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "no CUDA device" in r.stderr and r.stderr.count("\n") == 1


def test_commscheds_own_warnings_are_one_line_and_other_librarys_are_handed_on():
    """The contended search's budget warning printed a source path and a line of code."""
    import commsched.planners.optimal_contended as oc
    from commsched.cli.main import _one_line_warnings

    handed_on = []
    show = _one_line_warnings(lambda *a: handed_on.append(a[2]))
    from click.testing import CliRunner

    with CliRunner().isolation() as (_, err, _):
        show(RuntimeWarning("it ran out\nof budget"), RuntimeWarning, oc.__file__, 1)
        show(UserWarning("torch's"), UserWarning, "/elsewhere/torch/nn/modules/module.py", 1)
        said = err.getvalue().decode()
    assert said == "commsched: warning: it ran out\\nof budget\n"
    assert handed_on == ["/elsewhere/torch/nn/modules/module.py"]


def test_rows_tied_with_the_recommendation_follow_it_and_a_profile_without_a_device_says_none(tmp_path):
    """A one-tensor model makes every plan one bucket: stock DDP's is recommended, so its row leads
    the tie (it was listed last, under wfbp's). A profile with no device named printed "(batch 1, , measured)"."""
    import json

    prof = tmp_path / "one.json"
    prof.write_text(json.dumps({"schema": "commsched.profile/v1", "model": "one", "batch_size": 1, "source": "measured",
                                "forward_s": 0.01, "tensors": [{"name": "w", "bytes": 4_000_000, "backward_s": 0.02}]}))
    r = run("plan", "--profile", str(prof), "--strategy", "wfbp,synceasgd,ddp", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    rows = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    assert rows == ["ddp *", "wfbp", "synceasgd"], r.stdout
    assert "one (batch 1, measured) on v100-10gbe" in r.stdout
