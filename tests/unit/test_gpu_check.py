"""Issue 31, item 4: ``make gpu-check``. Without CUDA it takes its dry path (here); its output folder
keeps the limits (at most 8 files, each under 16 MiB, at most one sub-folder); its GPU path imports
neither jsonschema nor selenium nor torchvision; and the parts that need no GPU (comparing profiles,
reading NCCL's log, two ranks' threads, the copy kernel's PTX, the profile worker's flow) work."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commsched.gpu_check.driver import (
    FILES,
    MAX_FILE_BYTES,
    MAX_FILES,
    STEPS,
    LimitError,
    Outbox,
    audit,
    channel_bytes,
    check_channels,
    compare_profiles,
    summary_text,
)
from commsched.gpu_check.nccl_log import coll_lines, comm_channels, excerpt, plugin_state

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(SRC), **extra}


def test_dry_path_says_what_it_skipped_and_why_within_the_limits(tmp_path):
    """The command as make runs it (``PYTHONPATH=src python3 -m commsched.gpu_check``), its folder
    from $OUT: versions first, every GPU step skipped with the reason, results.json and summary.md."""
    import torch

    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.json.gz").write_bytes(b"stale")  # a previous run's file of the check's own: removed
    (out / "keep.txt").write_text("not the check's")  # anything else: left alone
    args = ["--dry-run"] if torch.cuda.is_available() else []  # on a GPU machine the dry path is asked for
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "commsched.gpu_check", *args], cwd=tmp_path, env=_env(OUT=str(out)),
                       capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert elapsed < 60
    lines = r.stdout.splitlines()
    assert lines[0].startswith("[gpu-check] versions: python ") and " torch " in lines[0] and " NCCL " in lines[0] and " GPU " in lines[0]
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == "commsched.gpu_check/v1" and doc["dry_run"] is True
    steps = {s["name"]: s for s in doc["steps"]}
    assert list(steps) == [s.name for s in STEPS]
    assert steps["versions"]["status"] == "ok" and steps["versions"]["details"]["torch"] == torch.__version__
    for name in ("cuda-tests", "profiles", "nccl-tuner", "contention"):
        assert steps[name]["status"] == "skipped"
        assert ("no CUDA device" in steps[name]["why"]) or ("--dry-run" in steps[name]["why"])
        assert f"{name}: SKIPPED" in r.stdout
    summary = (out / "summary.md").read_text()
    for name in steps:
        assert f"| {name} | " in summary
    assert not (out / "trace.json.gz").exists() and (out / "keep.txt").exists()
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "results.json", "summary.md"]
    assert audit(out) == []


def test_steps_runs_only_the_steps_named_and_refuses_an_unknown_one(tmp_path, monkeypatch):
    """A rerun of the failed steps: --steps runs those (after the versions), records the others as
    not asked for; a misspelt step is a usage error that names it and the steps there are."""
    from commsched.gpu_check import driver

    ran = []
    monkeypatch.setattr(driver.Check, "_versions", lambda self: {"torch": "2.11.0", "cuda_available": True})
    for spec in STEPS[1:]:
        monkeypatch.setattr(driver.Check, "_step_" + spec.name.replace("-", "_"),
                            lambda self, limit, n=spec.name: ran.append(n) or driver.StepResult(n, "ok", ""))
    out = tmp_path / "out"
    assert driver.main([str(out), "--steps", "contention,profiles"]) == 0
    assert ran == ["profiles", "contention"]
    steps = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}
    assert steps["cuda-tests"]["status"] == steps["nccl-tuner"]["status"] == "skipped"
    assert "not asked for (--steps contention,profiles)" in steps["cuda-tests"]["why"]
    r = subprocess.run([sys.executable, "-m", "commsched.gpu_check", str(tmp_path / "o2"), "--steps", "profile"],
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown step(s) profile" in r.stderr and "nccl-tuner" in r.stderr, r.stderr
    assert driver.main([str(tmp_path / "o3"), "--steps", "versions"]) == 2  # always runs: not a step to name
    assert driver.main([str(tmp_path / "o3"), "--steps", ","]) == 2  # no step at all is not every step
    assert driver.main([str(out), "--steps", "profiles"]) == 2  # a rerun into the first run's folder
    assert ran == ["profiles", "contention"] and (out / "results.json").exists()


def test_make_gpu_check_uses_the_machines_python3_and_no_venv():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    for cmd, env, folder in ((["gpu-check", "OUT=some/dir"], {}, "some/dir"), (["gpu-check"], {"OUT": "/x/y"}, "/x/y"),
                             (["gpu-check"], {}, "out/gpu-check")):
        # Under `make test` the environment carries MAKELEVEL/MAKEFLAGS: a nested make would
        # then announce its directory, which is not part of the recipe.
        env = {k: v for k, v in os.environ.items() if k not in ("OUT", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")} | env
        r = subprocess.run([make, "--no-print-directory", "-n", *cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        recipe = r.stdout.strip().splitlines()
        assert len(recipe) == 1, recipe  # nothing else first: no venv is built
        assert ".venv" not in recipe[0] and "pip" not in recipe[0]
        assert "PYTHONPATH=src" in recipe[0] and "python3 -m commsched.gpu_check" in recipe[0]
        assert recipe[0].rstrip().endswith(f'"{folder}"')


def test_the_output_folder_keeps_its_limits(tmp_path):
    box = Outbox(tmp_path / "o")
    assert len(FILES) <= MAX_FILES
    for name in FILES:
        box.write_text(name, "x")
    assert audit(box.root) == []
    with pytest.raises(LimitError, match="not one of the 8 files"):
        box.write_text("ninth.txt", "x")
    with pytest.raises(LimitError, match="over the limit"):
        box.write_bytes("trace.json.gz", b"\0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(LimitError, match="folders deep"):
        Outbox(tmp_path / "p", names=("a/b/c.txt",))
    with pytest.raises(LimitError, match="plain relative path"):
        Outbox(tmp_path / "p", names=("../escape.txt",))
    with pytest.raises(LimitError, match="at most 8 files"):
        Outbox(tmp_path / "p", names=tuple(f"f{i}" for i in range(9)))
    small = Outbox(tmp_path / "s", names=("a.txt", "sub/b.txt"), max_bytes=100)
    small.write_text("a.txt", "y" * 1000)  # text is cut to the limit, with a line saying so
    text = (small.root / "a.txt").read_text()
    assert len(text.encode()) <= 100 and "[cut: 1,000 bytes" in text
    small.write_text("sub/b.txt", "one folder down is allowed")
    assert audit(small.root, max_bytes=100) == []
    # the audit sees what the Outbox did not write
    (box.root / "deep" / "er").mkdir(parents=True)
    (box.root / "deep" / "er" / "f.txt").write_text("x")
    (box.root / "big.bin").write_bytes(b"\0" * 2048)
    (box.root / "link").symlink_to(box.root / "big.bin")
    problems = audit(box.root, max_bytes=1024)
    assert any("10 files" in p or "11 files" in p for p in problems)
    assert any(p.startswith("big.bin: 2,048 bytes") for p in problems)
    assert any("deep/er/f.txt: 2 folders deep" in p for p in problems)
    assert any(p.startswith("link: not a plain file") for p in problems)


def _profile(names, forward_s=0.010, backward_s=(0.001,), device="NVIDIA H100", bytes_=4):
    bw = list(backward_s) * len(names) if len(backward_s) == 1 else list(backward_s)
    return {"forward_s": forward_s, "device": device,
            "tensors": [{"name": n, "bytes": bytes_, "backward_s": b} for n, b in zip(names, bw)]}


def test_compare_profiles_needs_the_same_order_and_times_within_ten_percent():
    m = _profile(["fc.bias", "fc.weight", "conv.weight"])
    ok = compare_profiles(m, _profile(["fc.bias", "fc.weight", "conv.weight"], 0.0109, (0.00091,)))
    assert ok["ok"] and ok["same_order"] and ok["why"] == ""
    assert ok["forward_s"]["rel_diff"] == pytest.approx(0.09) and ok["backward_s"]["rel_diff"] == pytest.approx(0.09)
    swapped = compare_profiles(m, _profile(["fc.weight", "fc.bias", "conv.weight"]))
    assert not swapped["ok"] and swapped["first_difference"] == {"position": 0, "measured": "fc.bias", "from_trace": "fc.weight"}
    shorter = compare_profiles(m, _profile(["fc.bias", "fc.weight"]))
    assert not shorter["ok"] and shorter["first_difference"]["position"] == 2
    slow_forward = compare_profiles(m, _profile(["fc.bias", "fc.weight", "conv.weight"], 0.0111))
    assert not slow_forward["ok"] and slow_forward["why"].startswith("forward 11.10 ms from the trace vs 10.00 ms")
    slow_backward = compare_profiles(m, _profile(["fc.bias", "fc.weight", "conv.weight"], 0.010, (0.0008,)))
    assert not slow_backward["ok"] and "backward" in slow_backward["why"] and "20.0% apart" in slow_backward["why"]
    other_bytes = compare_profiles(m, _profile(["fc.bias", "fc.weight", "conv.weight"], bytes_=8))
    assert not other_bytes["ok"] and "different bytes" in other_bytes["why"]
    on_cpu = _profile(["a"], device="cpu")
    assert "on the CPU" in compare_profiles(on_cpu, _profile(["a"]))["why"]
    assert compare_profiles(on_cpu, _profile(["a"]), on_cpu_ok=True)["ok"]


# Lines as NCCL writes them: src/debug.cc's prefix "host:pid:tid [dev] NCCL INFO " and the format strings
# of the source lines nccl_log cites (NCCL 2.30.7; 2.27's plugin line for the older form).
P = "gpu1:4242:4250 [0] NCCL INFO "
LOG = "\n".join([
    "gpu1:4242:4242 [0] NCCL INFO NCCL version 2.30.7+cuda13.0",
    P + "NCCL_TUNER_PLUGIN set by environment to /tmp/w/libcommsched_nccl_tuner.so",
    P + "commsched NCCL tuner: 4 size ranges from /tmp/w/tuner-table.txt",
    P + "Successfully loaded external tuner plugin /tmp/w/libcommsched_nccl_tuner.so",
    P + "TUNER/Plugin: Using commsched (v6)",
    P + "8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 8 p2p channels per peer",
    "gpu1:4242:4251 [0] NCCL INFO 8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 8 p2p channels per peer",
    P + "AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}",
    P + f"AllReduce: {channel_bytes(1)} Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..0}}",
    P + f"AllReduce: {channel_bytes(2)} Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..1}}",
    P + f"AllReduce: {channel_bytes(4)} Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..2}}",
    P + f"Broadcast: {channel_bytes(8)} Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..7}}",
    P + "Channel 00/0 : 0[0] -> 1[0] via P2P/direct pointer",
])


def test_nccl_log_shows_the_plugin_and_each_all_reduces_channels():
    st = plugin_state(LOG)
    assert st.loaded and st.name == "commsched" and st.abi_version == 6 and st.ranges == 4 and not st.problems
    older = plugin_state(P + "TUNER/Plugin: Using tuner plugin commsched")  # NCCL 2.26/2.27
    assert older.loaded and older.name == "commsched" and older.abi_version is None and older.ranges is None
    missing = plugin_state(P + "TUNER/Plugin: Could not find: libnope.so. Using internal tuner plugin.")
    assert not missing.loaded and missing.problems
    assert not plugin_state(P + "TUNER/Plugin: Using internal tuner plugin.").loaded  # NCCL 2.26's line when it loaded none
    assert not plugin_state(P + "commsched NCCL tuner: 4 size ranges from t.txt").loaded  # the plugin's word is not NCCL's

    lines = coll_lines(LOG)
    assert [(x.bytes, x.channels, x.algorithm, x.protocol) for x in lines[:2]] == [(33554432, 8, "RING", "SIMPLE"), (channel_bytes(1), 1, "RING", "SIMPLE")]
    assert len(lines) == 4  # the Broadcast is not an all-reduce
    assert comm_channels(LOG) == (8, 8)
    rows = check_channels([(f"table {b}", channel_bytes(b), b) for b in (1, 2, 4, 8)], lines)
    assert [r["ok"] for r in rows] == [True, True, False, False]
    assert rows[2]["logged_channels"] == [3] and rows[3]["logged_channels"] == []
    kept = excerpt(LOG)
    assert "via P2P" not in kept and "TUNER/Plugin: Using commsched (v6)" in kept and kept.count("Bytes -> Algo") == 5
    long = excerpt("\n".join([P + "TUNER x"] * 1000), max_lines=10)
    assert len(long.splitlines()) == 11 and "990 lines left out" in long


def test_two_ranks_threads_surface_the_real_error_and_never_hang():
    from commsched.gpu_check.steps import _pair

    barrier = threading.Barrier(2, timeout=30)

    def fails(r):
        if r == 1:
            raise ValueError("rank 1 broke")
        barrier.wait()  # would wait 30 s for rank 1 unless the failure breaks the barrier
        return r

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 broke"):
        _pair(fails, 20, barrier)
    assert time.monotonic() - t0 < 5
    assert _pair(lambda r: r * 10, 5) == [0, 10]
    stop = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        _pair(lambda r: stop.wait(30), 1)  # a rank stuck (in NCCL, say) costs the timeout, no more
    assert time.monotonic() - t0 < 5
    stop.set()


def test_the_gpu_path_imports_neither_jsonschema_nor_selenium_nor_torchvision():
    """What the GPU machine lacks is blocked; every module the check and its workers load imports, and a
    zoo model without torchvision builds."""
    code = (
        "import sys\n"
        "for m in ('jsonschema', 'selenium', 'torchvision'): sys.modules[m] = None\n"
        "import commsched.gpu_check.driver, commsched.gpu_check.steps, commsched.gpu_check.nccl_log, commsched.gpu_check.copy_kernel\n"
        "import commsched.cli.main, commsched.profile.measure, commsched.profile.from_trace, commsched.models.zoo\n"
        "import commsched.nccl_tuner, commsched.cost.resource_samples, commsched.runtime.gpu_bench, commsched.cost.cluster, torch.profiler, torch.distributed\n"
        "from commsched.models.zoo import build_model\n"
        "assert type(build_model('bert_small')).__name__ == 'BertBase'\n"
        "try:\n"
        "    build_model('resnet18')\n"
        "except Exception as e:\n"
        "    assert 'needs torchvision' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('resnet18 built without torchvision')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'selenium', 'torchvision') and sys.modules[m] is not None)\n"
        "assert not bad, bad\n"
        "print('clean')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "clean", r.stderr[-3000:]


def _ptxas():
    found = shutil.which("ptxas")
    if found:
        return found
    try:
        import triton  # ships ptxas with its NVIDIA backend
    except ImportError:
        return None
    p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return str(p) if p.is_file() else None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_copy_kernels_ptx_assembles(tmp_path, arch):
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("no ptxas (CUDA toolkit or triton) to assemble the PTX with")
    from commsched.gpu_check.copy_kernel import KERNEL_NAME, PTX

    src = tmp_path / "k.ptx"
    src.write_text(PTX)
    r = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin"), "-v"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"entry function '{KERNEL_NAME}'" in r.stderr + r.stdout


def test_the_profile_workers_flow_on_the_cpu(tmp_path):
    """The profile step's worker (``profile --measure``, a torch.profiler trace, ``profile --from-trace``,
    the comparison) on the CPU with the smallest zoo model: the flow, not the 10% (CPU timings under the
    profiler are not the GPU's)."""
    result = tmp_path / "r.json"
    args = {"model": "bert_small", "batch_size": 2, "work": str(tmp_path), "device": "cpu", "warmup": 0, "iters": 1, "trace_steps": 1}
    r = subprocess.run([sys.executable, "-m", "commsched.gpu_check.steps", "profile", str(result), json.dumps(args)],
                       env=_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and result.is_file(), r.stderr[-3000:]
    doc = json.loads(result.read_text())
    d = doc["details"]
    assert d.get("comparison"), doc
    assert d["comparison"]["same_order"] and d["comparison"]["tensors"] == 56, d["comparison"]
    assert d["measured"]["device"] == "cpu" and d["measured"]["source"] == "measured"
    assert "--measure --device cpu --model bert_small" in d["measure_command"]
    assert Path(d["trace"]).is_file() and d["trace_bytes"] > 0
    assert doc["status"] in ("ok", "failed") and (doc["status"] == "ok") == d["comparison"]["ok"]


def test_summary_of_a_full_run_names_every_part():
    """The summary of a GPU run's results (made up here): the profiles, channels and contention tables."""
    cmp = compare_profiles(_profile(["a", "b"]), _profile(["a", "b"]))
    rows = check_channels([("table 2", channel_bytes(2), 2)], coll_lines(LOG))
    doc = {
        "versions": {"python": "3.12", "torch": "2.11", "nccl": "2.30.7", "gpu": "NVIDIA H100"}, "total_s": 200.0, "budget_s": 450.0,
        "dry_run": False, "files": {"results.json": "every step's result"},
        "steps": [
            {"name": "profiles", "status": "ok", "why": "", "seconds": 30.0, "budget_s": 100, "notes": [],
             "details": {"resnet50": {"batch_size": 64, "comparison": cmp}}},
            {"name": "nccl-tuner", "status": "ok", "why": "", "seconds": 20.0, "budget_s": 80, "notes": ["a | note"],
             "details": {"tuner": {"channels": rows}}},
            {"name": "contention", "status": "ok", "why": "a|b", "seconds": 40.0, "budget_s": 100, "notes": [],
             "details": {"allreduce": {"model": "resnet18", "batch_size": 32, "per_config": [
                 {"blocks": 2, "alone_ms": 8.0, "beside_ms": 8.8, "slowdown_median": 1.1, "covered_fraction": 1.0}]}}},
        ],
    }
    text = summary_text(doc)
    assert "| profiles | ok | 30.0 s of 100 s |" in text and "a\\|b" in text
    assert "| resnet50 | 64 | 2, True | 10.00 / 10.00 (0.0%)" in text
    assert f"| {channel_bytes(2)} | 2 | [2] | RING/SIMPLE | True |" in text
    assert "two NCCL ranks on one GPU, not a multi-GPU measurement" in text and "| 2 | 8.00 | 8.80 | 1.100 | 100% |" in text


def test_the_channel_checks_sizes_are_ones_nccl_does_not_lower():
    """By the NCCL 2.30 launch model: all the table's or the group's channels at 32 MiB + 4 KiB x B, and
    (so that the check could fail) fewer at 64 KiB."""
    from commsched.gpu_check.driver import TUNER_BLOCKS, nccl_keeps

    for b in TUNER_BLOCKS:
        assert nccl_keeps(channel_bytes(b), b, max(TUNER_BLOCKS), tuner=True)
        assert nccl_keeps(channel_bytes(b), b, b, tuner=False)
    assert nccl_keeps(64 << 10, 8, 8, tuner=False) is False


def _stand_in_workers(tmp_path, nccl=(2, 30, 7), wrong_channels=False, allreduce_hangs=False):
    """run_worker's stand-ins: what each worker would return on a GPU, and the NCCL log it would leave."""
    from commsched.gpu_check import steps

    def run_worker(name, args, timeout_s, work, env=None):
        assert 0 < timeout_s <= 120
        if name == "versions":
            return {"status": "ok", "why": "", "details": {
                "python": "3.12.3", "torch": "2.11.0", "torch_cuda": "12.8", "nccl": ".".join(map(str, nccl)), "nccl_tuple": list(nccl),
                "cuda_available": True, "device_count": 1, "gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0", "sms": 132,
                "memory_gib": 79.1, "torchvision": None, "torchvision_error": "No module named 'torchvision'", "c_compiler": shutil.which("cc")}}, "", 1.0
        if name == "profile":
            trace = tmp_path / f"trace-{args['model']}.json"
            trace.write_text('{"traceEvents": []}')
            m = _profile(["a.weight", "a.bias"], 0.020, (0.004,))
            t = _profile(["a.weight", "a.bias"], 0.021, (0.0042,))
            return {"status": "ok", "why": "", "details": {"measured": m, "from_trace": t, "comparison": compare_profiles(m, t), "trace": str(trace),
                                                           "trace_bytes": 20, "measure_command": "commsched profile --measure ..."}}, "", 5.0
        if name == "channels":
            log = Path(env["NCCL_DEBUG_FILE"].replace("%p", "4242"))
            lines = [P + "NCCL version 2.30.7+cuda12.8"]
            if args["mechanism"] in ("tuner", "single"):
                assert Path(env["NCCL_TUNER_PLUGIN"]).is_file() and Path(env["COMMSCHED_NCCL_TUNER_TABLE"]).is_file()
                lines += [P + "commsched NCCL tuner: 4 size ranges from t.txt", P + "TUNER/Plugin: Using commsched (v6)"]
            if args["mechanism"] != "single":
                assert env["NCCL_MULTI_RANK_GPU_ENABLE"] == "1"
                for _, blocks, nbytes in args["calls"]:
                    want = {channel_bytes(b): b for b in (1, 2, 4, 8)}.get(nbytes, 8)
                    got = want - 1 if wrong_channels and want == 4 else want
                    lines.append(P + f"AllReduce: {nbytes} Bytes -> Algo RING proto SIMPLE channel{{Lo..Hi}}={{0..{got - 1}}}")
            log.write_text("\n".join(lines) + "\n")
            return {"status": "ok", "why": "", "details": {}}, "", 3.0
        if name == "contention":
            if allreduce_hangs and args["mode"] == "allreduce":
                assert timeout_s <= 60  # the copy kernel's share of the step is kept
                return {"status": "failed", "why": f"timed out after {timeout_s:.0f} s (killed)", "details": {}}, "", timeout_s
            allreduce = [(b, 256, n, n / (10e9 * b ** 0.5) + 1e-5) for b in args["blocks"] for n in (1 << 20, 8 << 20, 64 << 20)]
            compute = [(b, 256, 1.0 + 0.02 * b + 0.001 * i) for b in args["blocks"] for i in range(3)]
            doc = steps._samples_doc(2 if args["mode"] == "allreduce" else 1, allreduce, compute, "NVIDIA H100, stand-in", f"stand-in {args['mode']}")
            per = [{"blocks": b, "slowdown_median": 1.0 + 0.02 * b, "alone_ms": 10.0, "beside_ms": 10.0 * (1 + 0.02 * b), "covered_fraction": 1.0}
                   for b in args["blocks"]]
            return {"status": "ok", "why": "", "details": {"samples": doc, "mode": args["mode"], "model": args["model"],
                                                           "batch_size": args["batch_size"], "per_config": per}}, "", 20.0
        raise AssertionError(name)

    return run_worker


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the tuner plugin with")
@pytest.mark.parametrize("nccl, wrong", [((2, 30, 7), False), ((2, 30, 7), "channels"), ((2, 30, 7), "hang"), ((2, 28, 9), False)])
def test_the_gpu_path_with_stand_in_workers_writes_every_artifact(tmp_path, monkeypatch, nccl, wrong):
    """The driver's GPU path with its workers replaced (what they return on a GPU, made up): every step's
    result, the artifacts within the limits, the samples fitted into a cluster that loads; a channel
    count that differs from the table's fails the step; NCCL < 2.30 checks the plugin with one rank
    and probes contention with the copy kernel."""
    from commsched.cost.cluster import cluster_from_json
    from commsched.gpu_check import driver

    monkeypatch.setattr(driver, "run_worker", _stand_in_workers(tmp_path, nccl, wrong == "channels", wrong == "hang"))
    monkeypatch.setattr(driver, "run_command", lambda cmd, timeout_s, env=None, cwd=None: (
        0, "tests/unit/test_measure.py::test_cuda_profile_uses_events PASSED [ 50%]\n"
           "tests/unit/test_measure.py::test_measure_zoo_profile_runs_on_cuda_by_default SKIPPED (x) [100%]\n", 2.0))
    out = tmp_path / "out"
    printed = []
    rc = driver.Check(out, echo=lambda *a, **k: printed.append(a[0])).run()
    doc = json.loads((out / "results.json").read_text())
    steps = {s["name"]: s for s in doc["steps"]}
    assert printed[0].startswith("[gpu-check] versions: python 3.12.3, torch 2.11.0, CUDA 12.8, NCCL")
    assert rc == (1 if wrong else 0), {k: (s["status"], s["why"]) for k, s in steps.items()}
    assert doc["dry_run"] is False
    assert steps["cuda-tests"]["status"] == "ok" and steps["cuda-tests"]["details"]["counts"] == {"passed": 1, "skipped": 1}
    assert steps["profiles"]["status"] == "ok" and list(steps["profiles"]["details"]) == ["bert_base", "bert_small"]  # no torchvision
    tuner = steps["nccl-tuner"]
    if nccl < (2, 30, 0):
        assert tuner["status"] == "ok" and "older than 2.30" in tuner["notes"][0] and list(tuner["details"]).count("single") == 1
        assert steps["contention"]["details"]["kernel"]["mode"] == "kernel"
    elif wrong == "channels":
        assert tuner["status"] == "failed" and f"{channel_bytes(4)} B ran on [3] channels, expected 4" in tuner["why"]
    else:
        assert tuner["status"] == "ok" and all(r["ok"] for t in ("tuner", "groups") for r in tuner["details"][t]["channels"])
        assert tuner["details"]["tuner"]["plugin"]["name"] == "commsched" and tuner["details"]["tuner"]["nccl_choice_at_32MiB"] == [8]
    if wrong == "hang":  # a failed two-rank run fails the step; the copy kernel's samples still come back
        c = steps["contention"]
        assert c["status"] == "failed" and c["why"].startswith("allreduce run: timed out")
        assert c["details"]["kernel"]["status"] == "ok" and "after the two-rank all-reduce run failed" in " ".join(c["notes"])
    else:
        assert steps["contention"]["status"] == "ok"
    cluster = cluster_from_json(json.loads((out / "resource-cluster.json").read_text()))
    assert [c.short for c in cluster.resources.allowed] == ["1x256", "2x256", "4x256", "8x256"]
    assert json.loads((out / "resource-samples.json").read_text())["gpus"] == 1
    assert "TUNER/Plugin: Using commsched (v6)" in (out / "nccl-log.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert audit(out) == []
    summary = (out / "summary.md").read_text()
    assert "## profile --measure vs --from-trace" in summary and "## contention" in summary


@pytest.mark.parametrize("nccl", [(2, 30, 7), (2, 28, 9)])
def test_without_a_c_compiler_the_groups_channels_are_still_checked(tmp_path, monkeypatch, nccl):
    """The min/max-CTA groups need no plugin: on a GPU machine without a C compiler (NCCL >= 2.30)
    the nccl-tuner step still runs and checks their channels, and says the plugin part was skipped;
    with an older NCCL there is nothing left to check and the step is skipped."""
    from commsched.gpu_check import driver

    workers = _stand_in_workers(tmp_path, nccl)

    def run_worker(name, args, timeout_s, work, env=None):
        res = workers(name, args, timeout_s, work, env)
        if name == "versions":
            res[0]["details"]["c_compiler"] = None
        if name == "channels":
            assert args["mechanism"] == "groups" and "NCCL_TUNER_PLUGIN" not in env
        return res

    monkeypatch.setattr(driver, "run_worker", run_worker)
    monkeypatch.setattr(driver, "run_command", lambda cmd, timeout_s, env=None, cwd=None: (0, "t.py::t PASSED\n", 1.0))
    out = tmp_path / "out"
    driver.Check(out, echo=lambda *a, **k: None).run()
    tuner = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}["nccl-tuner"]
    if nccl < (2, 30, 0):
        assert tuner["status"] == "skipped" and "no C compiler" in tuner["why"] and "older than 2.30" in tuner["why"]
        return
    assert tuner["status"] == "ok", tuner["why"]
    assert list(tuner["details"]).count("groups") == 1 and "tuner" not in tuner["details"]
    assert all(row["ok"] for row in tuner["details"]["groups"]["channels"])
    assert any("no C compiler" in n for n in tuner["notes"]) and "groups' blocks" in tuner["why"]


def test_a_plugin_that_does_not_build_fails_the_step_but_the_groups_are_still_checked(tmp_path, monkeypatch):
    from commsched import nccl_tuner
    from commsched.errors import CommschedError
    from commsched.gpu_check import driver

    def broken(out_path):
        raise CommschedError("cc exited 1: stdio.h: No such file or directory")

    monkeypatch.setattr(nccl_tuner, "build_plugin", broken)
    monkeypatch.setattr(driver, "run_worker", _stand_in_workers(tmp_path))
    monkeypatch.setattr(driver, "run_command", lambda cmd, timeout_s, env=None, cwd=None: (0, "t.py::t PASSED\n", 1.0))
    out = tmp_path / "out"
    driver.Check(out, echo=lambda *a, **k: None).run()
    tuner = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}["nccl-tuner"]
    assert tuner["status"] == "failed" and "stdio.h" in tuner["why"]
    assert all(row["ok"] for row in tuner["details"]["groups"]["channels"])


def test_the_cuda_tests_that_launch_ranks_run_last(tmp_path):
    """Single-process CUDA tests run before the ones that start ranks (slow, and a hang there must not
    cost the others their result within the step's time limit)."""
    from commsched.gpu_check.driver import cuda_test_files

    (tmp_path / "tests" / "distributed").mkdir(parents=True)
    (tmp_path / "tests" / "unit").mkdir()
    (tmp_path / "tests" / "distributed" / "test_a.py").write_text("@pytest.mark.cuda\ndef test(): run_workers('w.py', [])\n")
    (tmp_path / "tests" / "unit" / "test_b.py").write_text("@pytest.mark.cuda\ndef test(): subprocess.run(['python', '-m', 'torch.distributed.run'])\n")
    (tmp_path / "tests" / "unit" / "test_c.py").write_text("@pytest.mark.cuda\ndef test(): pass\n")
    (tmp_path / "tests" / "unit" / "test_d.py").write_text("def test(): pass\n")
    assert cuda_test_files(tmp_path) == ["tests/unit/test_c.py", "tests/distributed/test_a.py", "tests/unit/test_b.py"]
    files = cuda_test_files(ROOT)
    assert files[:2] == sorted(files[:2]) and {"tests/unit/test_measure.py", "tests/unit/test_from_trace_measured.py"} == set(files[:2])


class _SlowReader(threading.Barrier):
    """A barrier whose rank-1 thread is slow to go on after each wait (a thread the GIL or the OS
    holds back just after the barrier lets it through)."""

    def wait(self, timeout=None):
        i = super().wait(timeout)
        if threading.current_thread().name == "r1":
            time.sleep(0.05)
        return i


def test_two_ranks_agree_on_every_hold_even_when_one_retries_at_once():
    """held_time_s asks both ranks whether the hold outlasted their launches, and a rank retries at
    once when not: the first answer of each try must reach both ranks before either writes its next
    one, or they disagree and run different numbers of batches (a hang in NCCL)."""
    from commsched.gpu_check.steps import _agreement

    barrier, shared = _SlowReader(2, timeout=10), {}
    answers = {0: [], 1: []}
    tries = {0: [False, True], 1: [True, True]}  # rank 0 ran out of hold on the first try

    def rank(r):
        agree = _agreement(shared, barrier, r)
        for held in tries[r]:
            answers[r].append(agree(held))

    threads = [threading.Thread(target=rank, args=(r,), name=f"r{r}") for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert answers[0] == answers[1] == [False, True]


def test_a_check_not_run_leaves_no_scratch_folder(tmp_path, monkeypatch):
    """Building a Check made its scratch folder, which only run() removes: one leaked per test."""
    from commsched.gpu_check import driver

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(driver.tempfile, "tempdir", str(scratch))
    driver.Check(tmp_path / "out", echo=lambda *a, **k: None)
    assert list(scratch.iterdir()) == []


def test_resnet50_is_profiled_at_a_batch_whose_kernels_outlast_the_profiled_host(tmp_path):
    """Batch 64 on the H200 left the GPU waiting for the profiler's launches (the trace 19-37% slower
    than --measure); 256 where the card holds it, 64 on a smaller card; BERT models without torchvision."""
    from commsched.gpu_check import driver

    check = driver.Check(tmp_path / "out", echo=lambda *a, **k: None)
    check.versions = {"torchvision": "0.26.0", "memory_gib": 139.8}
    assert check.profile_models() == [("resnet50", 256), ("bert_base", 32)]
    check.versions = {"torchvision": "0.26.0", "memory_gib": 23.6}
    assert check.profile_models() == [("resnet50", 64), ("bert_base", 32)]
    check.versions = {"torchvision": None, "memory_gib": 139.8}
    assert [m for m, _ in check.profile_models()] == ["bert_base", "bert_small"]


def test_the_contention_probe_keeps_a_large_card_busy(tmp_path):
    """resnet18 at batch 32 was launch-bound on the H200 (its slowdowns were the host's jitter):
    batch 256 where the card holds it, 32 on a smaller one; bert_base without torchvision."""
    from commsched.gpu_check import driver

    check = driver.Check(tmp_path / "out", echo=lambda *a, **k: None)
    check.versions = {"torchvision": "0.26.0", "memory_gib": 139.8}
    assert check.contention_model() == ("resnet18", 256)
    check.versions = {"torchvision": "0.26.0", "memory_gib": 23.6}
    assert check.contention_model() == ("resnet18", 32)
    check.versions = {"torchvision": None, "memory_gib": 79.1}
    assert check.contention_model() == ("bert_base", 128)
