"""Issue 13, item 3: `commsched bench-resources` refuses without CUDA, and its fit turns samples
into a cluster with resources: on the resource-sharing paper's measurements (the preset's own
grid) and on synthetic samples from a known grid, cost and compute slowdowns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from commsched.cost.cluster import cluster_from_json, preset, rs_grid_samples
from commsched.cost.contention import ResourceConfig
from commsched.errors import CommschedError
from commsched.runtime.bench_resources import ResourceSamples, fit_resource_cluster, merge, samples_from_json

DEFAULT = ResourceConfig(2, 256)


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "commsched", "bench-resources", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_measuring_refuses_without_cuda(tmp_path):
    r = _cli("--out", str(tmp_path / "s.json"))
    assert r.returncode == 2
    assert "no CUDA device" in r.stderr and "--fit" in r.stderr
    assert r.stderr.count("\n") == 1
    assert not (tmp_path / "s.json").exists()


def _absolute(relative, alpha_s=20e-6, beta=7e-10):
    """Figure 2's single 25 MB point repeated at a second size (an alpha-beta fit needs two): the
    grid stays flat in size, as the preset's is."""
    return [(c, size, f * (alpha_s + beta * size)) for c, _, f in relative for size in (1 << 20, 25 << 20)]


def test_the_papers_measurements_give_the_presets_grid():
    relative, compute = rs_grid_samples()
    samples = ResourceSamples(2, tuple(_absolute(relative)), tuple(compute), "V100S")
    cluster, report = fit_resource_cluster(samples, DEFAULT, "rs-refit")
    want = preset("rs-2xv100s-pcie").resources
    got = cluster.resources
    assert got.allowed == want.allowed and got.default == want.default
    for c in want.allowed:
        assert got.contention.compute_factor(c) == pytest.approx(want.contention.compute_factor(c), rel=1e-12)
        for b in (1 << 10, 25 << 20, 1 << 30):
            assert got.contention.allreduce_s(cluster.allreduce, b, c, False) / cluster.allreduce.times_s(np.array([float(b)]))[0] == pytest.approx(
                want.contention.allreduce_s(want_cost := preset("rs-2xv100s-pcie").allreduce, b, c, False) / want_cost.times_s(np.array([float(b)]))[0],
                rel=1e-9,
            )
    assert report["grid_compute"]["max_abs_rel_error"] == pytest.approx(0.355, abs=0.01)  # the spread between kernels
    assert "params" in report["libra_compute"]


def test_synthetic_samples_are_recovered(tmp_path):
    alpha, beta = 20e-6, 7e-10
    rel = {ResourceConfig(1, 64): (1.3, 1.1), ResourceConfig(1, 256): (1.0, 1.6), DEFAULT: (1.0, 2.3), ResourceConfig(4, 512): (1.6, 3.0)}
    sizes = [1 << 12, 1 << 20, 1 << 26]
    rng = np.random.default_rng(0)
    # noise on the other configs only: least squares on absolute times cannot see a 20 us alpha
    # under 1% noise on 47 ms messages (bench-comm has the same limit), the relative times can
    noise = lambda c: 0.0 if c == DEFAULT else 0.01 * rng.standard_normal()  # noqa: E731
    allreduce = [(c, b, (alpha + beta * b) * r[0] * (1 + noise(c))) for c, r in rel.items() for b in sizes for _ in range(5)]
    compute = [(c, r[1]) for c, r in rel.items()]
    # two files, as two NCCL_NTHREADS runs would write them, merged by the CLI's --fit
    files = []
    for part in (lambda c: c.threads_per_block <= 256, lambda c: c.threads_per_block > 256):
        s = ResourceSamples(2, tuple(x for x in allreduce if part(x[0])), tuple(x for x in compute if part(x[0])), "A100")
        path = tmp_path / f"s{len(files)}.json"
        path.write_text(json.dumps(s.to_json()))
        files.append(str(path))
    out = tmp_path / "cluster.json"
    r = _cli("--fit", *files, "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    cluster = cluster_from_json({k: v for k, v in doc.items() if k != "fit"})
    assert cluster.workers == 2 and cluster.device == "A100"
    assert cluster.allreduce.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert cluster.allreduce.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    for c, (ar, cf) in rel.items():
        assert cluster.resources.contention.compute_factor(c) == pytest.approx(cf, rel=1e-12)
        for b in sizes:
            t = cluster.resources.contention.allreduce_s(cluster.allreduce, b, c, False)
            assert t / cluster.allreduce.times_s(np.array([float(b)]))[0] == pytest.approx(ar, rel=0.03)
    # the result plans: joint on it runs
    from commsched.planners import Joint
    from commsched.profile.zoo_profile import zoo_profile

    ends, configs = Joint().assign(zoo_profile("resnet18", 32, "A100"), cluster.allreduce, cluster.resources)
    assert len(ends) == len(configs) and set(configs) <= set(rel)


def test_bad_samples_are_named(tmp_path):
    cfg = ResourceConfig(1, 64)
    only_other = ResourceSamples(2, ((cfg, 1024, 1e-4),), ((cfg, 1.2),))
    with pytest.raises(CommschedError, match="default config 2x256"):
        fit_resource_cluster(only_other, DEFAULT)
    gap = ResourceSamples(2, ((DEFAULT, 1024, 1e-4), (DEFAULT, 4096, 2e-4), (cfg, 8192, 1e-4)), ((cfg, 1.2), (DEFAULT, 2.0)))
    with pytest.raises(CommschedError, match=r"sizes \[8192\]"):
        fit_resource_cluster(gap, DEFAULT)
    with pytest.raises(CommschedError, match="different worker counts"):
        merge([ResourceSamples(2, (), ()), ResourceSamples(4, (), ())])
    with pytest.raises(CommschedError, match="not a commsched.resource_samples/v1"):
        samples_from_json({"schema": "x"})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "commsched.resource_samples/v1", "workers": 2, "allreduce": [{"blocks": 1}], "compute": []}))
    r = _cli("--fit", str(bad), "--out", str(tmp_path / "c.json"))
    assert r.returncode == 2 and "malformed sample" in r.stderr
    r = _cli("--fit", str(bad), "--out", str(tmp_path / "c.json"), "--default", "2by256")
    assert r.returncode == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA GPUs: measures NCCL all-reduces and a backward pass")
@pytest.mark.parametrize("mechanism", ["tuner", "groups"])
def test_measuring_on_gpus_writes_samples_that_fit(tmp_path, mechanism):
    n = min(2, torch.cuda.device_count())
    out = tmp_path / "s.json"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}", "-m", "commsched", "bench-resources", "--out", str(out), "--repeats", "3", "--mechanism", mechanism],
        capture_output=True, text=True, timeout=1200, env={**os.environ, "NCCL_NTHREADS": "256"},
    )
    assert r.returncode == 0, r.stderr
    samples = samples_from_json(json.loads(out.read_text()))
    assert {c.blocks for c, _, _ in samples.allreduce} == {1, 2, 3, 4}
    assert all(s > 0 for _, s in samples.compute)
    fit_resource_cluster(samples, DEFAULT)


@pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler on PATH")
def test_the_tuner_mechanism_loads_commscheds_plugin_before_nccl_starts(tmp_path, monkeypatch, capfd):
    """What measure_resources sets before init_process_group (the CUDA part skips here)."""
    import ctypes

    from commsched.nccl_tuner import TABLE_ENV
    from commsched.runtime.gpu_bench import _load_tuner

    monkeypatch.delenv("NCCL_MIN_NCHANNELS", raising=False)
    for name in ("NCCL_TUNER_PLUGIN", TABLE_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
    _load_tuner(tmp_path, 4)
    assert os.environ["NCCL_MIN_NCHANNELS"] == "4"  # NCCL caps the plugin's channels at the communicator's
    lib = ctypes.CDLL(os.environ["NCCL_TUNER_PLUGIN"])
    assert ctypes.c_char_p.in_dll(lib, "ncclTunerPlugin_v6").value == b"commsched"
    assert open(os.environ[TABLE_ENV]).read().startswith("commsched-nccl-tuner 1")
    monkeypatch.setenv("NCCL_MIN_NCHANNELS", "8")
    _load_tuner(tmp_path, 4)
    assert os.environ["NCCL_MIN_NCHANNELS"] == "8"  # the user's value stands
