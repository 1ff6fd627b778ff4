"""Issue 13, item 3: `commsched bench-resources` refuses without CUDA, and its fit turns samples
into a cluster with resources: on the resource-sharing paper's measurements (the preset's own
grid) and on synthetic samples from a known grid, cost and compute slowdowns."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from commsched.cost.cluster import cluster_from_json, preset, rs_grid_samples
from commsched.cost.resource_models import ResourceConfig
from commsched.errors import CommschedError
from commsched.cost.resource_samples import ResourceSamples, fit_resource_cluster, merge, samples_from_json

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


def _two_ranks_env() -> dict:
    """The variables for two ranks, one per GPU. Two rank *processes* on one GPU (NCCL >= 2.30 allows
    it with NCCL_MULTI_RANK_GPU_ENABLE=1, src/init.cc:68) time-slice without MPS, each rank's kernel
    spinning while the other's waits its turn: too slow for a test, so one GPU skips here (make
    gpu-check's contention step measures two ranks on one GPU as two threads of one process)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs: two rank processes on one GPU time-slice (gpu-check's contention step covers one GPU)")
    return {"NCCL_NTHREADS": "256"}


def _check_measured(samples, blocks) -> None:
    assert {c.blocks for c, _, _ in samples.allreduce} == set(blocks)
    assert all(math.isfinite(t) and t > 0 for _, _, t in samples.allreduce)
    assert all(math.isfinite(s) and s > 0 for _, s in samples.compute)
    assert samples.workers == 2 and samples.gpus == min(2, torch.cuda.device_count())
    fit_resource_cluster(samples, ResourceConfig(min(blocks), 256))


@pytest.mark.cuda
@pytest.mark.parametrize("mechanism", ["groups", "tuner"])
def test_measure_resources_from_a_script_on_gpus(monkeypatch, mechanism):
    """Two ranks (on two GPUs, or sharing one), a torch-only model: finite times, both block counts,
    and the samples say how many GPUs the ranks ran on."""
    if mechanism == "tuner" and not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("the tuner mechanism builds commsched's NCCL plugin: no C compiler on PATH")
    from tests.distributed.launch import results, run_workers

    for k, v in _two_ranks_env().items():
        monkeypatch.setenv(k, v)
    docs = results(run_workers("bench_resources.py", [mechanism], world=2, timeout_s=600))
    _check_measured(samples_from_json(docs[0]), [1, 2])


@pytest.mark.cuda
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="the CLI times torchvision's resnet18")
@pytest.mark.parametrize("mechanism", ["tuner", "groups"])
def test_measuring_on_gpus_writes_samples_that_fit(tmp_path, mechanism):
    out = tmp_path / "s.json"
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "commsched", "bench-resources", "--out", str(out), "--repeats", "3", "--mechanism", mechanism],
        capture_output=True, text=True, timeout=1200, env={**os.environ, **_two_ranks_env()},
    )
    assert r.returncode == 0, r.stderr
    _check_measured(samples_from_json(json.loads(out.read_text())), [1, 2, 3, 4])


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


# --- issue 31 item 1 (bench-resources): what is timed, on the CPU through a stand-in GPU ---


def _env_without_torchrun():
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}


def test_a_world_of_one_rank_is_refused_before_anything_else(tmp_path):
    """NCCL runs no kernel for one rank's all-reduce: the CLI, and measure_resources called from a
    script, refuse it with one line (here before the machine's lack of CUDA is even looked at)."""
    env = {**_env_without_torchrun(), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29999", "NCCL_NTHREADS": "256"}
    r = subprocess.run([sys.executable, "-m", "commsched", "bench-resources", "--out", str(tmp_path / "s.json")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2
    assert "at least 2 ranks" in r.stderr and "world size of 1" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "s.json").exists()
    from commsched.runtime.gpu_bench import measure_resources

    for world in (0, 1):
        with pytest.raises(CommschedError, match="at least 2 ranks"):
            measure_resources([1], 256, [4096], 1, "groups", world_size=world, rank=0, device=0)


class FakeGPU:
    """Stands in for one GPU and NCCL on the CPU: one timeline in stream order (a kernel starts when
    the GPU is free and the host has launched it), a host clock that each launch advances by
    ``launch_s``, events that complete when the timeline reaches them, and all-reduces of
    ``kernel_s`` that sum ``world`` equal buffers (multiply by ``world``)."""

    def __init__(self, launch_s: float, kernel_s: float, world: int = 2, rate: float = 1e9):
        self.host = self.free = 0.0
        self.launch_s, self.kernel_s, self.world, self.rate = launch_s, kernel_s, world, rate
        self.reduced: list[torch.Tensor] = []
        self.launches = 0

    def enqueue(self, seconds: float) -> None:
        self.free = max(self.free, self.host) + seconds

    def install(self, monkeypatch) -> None:
        import contextlib

        import torch.distributed as dist

        from commsched.runtime import gpu_bench

        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = max(gpu.free, gpu.host)

            def query(self):
                return self.t <= gpu.host

            def synchronize(self):
                gpu.host = max(gpu.host, self.t)

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

        class Work:
            def wait(self):
                return True

        def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            gpu.host += gpu.launch_s
            gpu.launches += 1
            gpu.enqueue(gpu.kernel_s)
            tensor.mul_(gpu.world)  # the sum of `world` ranks holding the same buffer
            gpu.reduced.append(tensor)
            return Work() if async_op else None

        def synchronize(device=None):
            gpu.host = max(gpu.host, gpu.free)

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: gpu.enqueue(cycles / gpu.rate))
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: "side")
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "FakeGPU")
        monkeypatch.setattr(dist, "all_reduce", all_reduce)
        monkeypatch.setattr(dist, "barrier", lambda device_ids=None: synchronize())
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: gpu.world)
        monkeypatch.setattr(gpu_bench, "_slowest", lambda value, device: value)  # one rank stands for all


class TimedModel(torch.nn.Module):
    """A model whose forward pass takes ``forward_s`` of GPU time and whose backward takes ``backward_s``."""

    def __init__(self, gpu: FakeGPU, forward_s: float, backward_s: float):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))
        gpu_, f, b = gpu, forward_s, backward_s

        class Step(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                gpu_.host += 1e-6
                gpu_.enqueue(f)
                return x.clone()

            @staticmethod
            def backward(ctx, grad):
                gpu_.enqueue(b)
                return grad

        self.step = Step

    def forward(self, x):
        return self.step.apply(x * self.w)


def test_small_allreduces_are_timed_without_the_hosts_launch_latency(monkeypatch):
    """20 us to launch, 5 us to run: the batch behind a hold times 5 us each (one event before a host
    launch would time 25 us); the batch counts; a hold too short for the launches is doubled."""
    from commsched.runtime.gpu_bench import MAX_BATCH, batch_count, time_allreduce_s

    assert [batch_count(n) for n in (4, 4096, 1 << 20, 16 << 20, 64 << 20, 256 << 20)] == [MAX_BATCH, MAX_BATCH, 64, 4, 1, 1]
    gpu = FakeGPU(launch_s=20e-6, kernel_s=5e-6)
    gpu.install(monkeypatch)
    buf = torch.zeros(1024)
    cpu = torch.device("cpu")
    assert time_allreduce_s(None, buf, batch_count(4096), cpu, gpu.rate) == pytest.approx(5e-6, rel=1e-9)
    assert gpu.launches == MAX_BATCH
    slow = FakeGPU(launch_s=200e-6, kernel_s=5e-6)  # 100 launches take 20 ms, past the first 6 ms hold
    slow.install(monkeypatch)
    assert time_allreduce_s(None, buf, 100, cpu, slow.rate) == pytest.approx(5e-6, rel=1e-9)
    assert slow.launches == 300  # held at the third try: 6 ms, 12 ms, 24 ms


def test_backward_time_is_the_backward_pass_alone(monkeypatch):
    from commsched.runtime.gpu_bench import backward_s

    gpu = FakeGPU(launch_s=20e-6, kernel_s=5e-6)
    gpu.install(monkeypatch)
    model = TimedModel(gpu, forward_s=3e-3, backward_s=7e-3)
    assert backward_s(model, torch.randn(4, 3), torch.device("cpu")) == pytest.approx(7e-3, rel=1e-9)
    assert model.w.grad is not None


def test_a_whole_measurement_keeps_its_buffers_finite_and_labels_shared_gpus(monkeypatch):
    """_measure end to end on the stand-in (two ranks, buffers summed hundreds of times): every
    all-reduced buffer is still finite, the samples have every config and size, the slowdowns are
    backward-only ratios, and the GPUs the ranks shared are recorded."""
    from commsched.runtime import gpu_bench

    gpu = FakeGPU(launch_s=10e-6, kernel_s=50e-6)
    gpu.install(monkeypatch)
    monkeypatch.setattr(gpu_bench, "CONTENTION_BYTES", 4096)  # the stand-in sums for real: keep it small
    configs = [ResourceConfig(1, 256), ResourceConfig(2, 256)]
    sizes = [4096, 1 << 20]
    model = TimedModel(gpu, forward_s=3e-3, backward_s=7e-3)
    samples = gpu_bench._measure(configs, {c: f"group{c.blocks}" for c in configs}, sizes, 3, torch.device("cpu"), model,
                                 torch.randn(4, 3), gpu_bench.shared_gpus([("host", "GPU-0"), ("host", "GPU-0")]))
    assert len(gpu.reduced) > 300
    buffers = {id(t): t for t in gpu.reduced}.values()  # each buffer once, after all its sums
    assert all(bool(torch.isfinite(t).all()) for t in buffers)
    assert {(c, b) for c, b, _ in samples.allreduce} == {(c, b) for c in configs for b in sizes}
    assert all(t == pytest.approx(50e-6) for _, _, t in samples.allreduce)
    assert len(samples.compute) == 6 and all(s >= 1.0 for _, s in samples.compute)
    assert (samples.workers, samples.gpus, samples.device) == (2, 1, "FakeGPU")
    doc = samples.to_json()
    assert doc["schema"] == "commsched.resource_samples/v1" and doc["gpus"] == 1
    assert samples_from_json(doc) == samples


def test_buffers_stay_finite_when_summed_again_and_again():
    from commsched.runtime.gpu_bench import allreduce_buffer, contention_launches, shared_gpus

    buf = allreduce_buffer(4096, "cpu")
    assert buf.numel() == 1024 and allreduce_buffer(1, "cpu").numel() == 1
    for _ in range(500):  # 2 ranks: each sum doubles; ones would pass 3.4e38 (float32's max) at 2**128
        buf.add_(buf.clone())
    assert bool(torch.isfinite(buf).all())
    assert contention_launches(0.1, 0.01) == 42 and contention_launches(1.0, 1e-9) == 10_000
    with pytest.raises(CommschedError):
        contention_launches(float("inf"), 1.0)
    assert shared_gpus([("a", "GPU-1"), ("a", "GPU-2")]) == 2 and shared_gpus([("a", "GPU-1")] * 2) == 1


def test_gpus_in_the_samples_file():
    """v1 files without ``gpus`` still read (one rank per GPU); files of one machine agree on it; the
    fitted cluster says when ranks shared a GPU."""
    base = {"schema": "commsched.resource_samples/v1", "workers": 2, "device": "H100", "allreduce": [], "compute": []}
    assert samples_from_json(base).gpus is None
    assert samples_from_json({**base, "gpus": 1}).gpus == 1
    with pytest.raises(CommschedError, match="gpus must be 1..workers"):
        samples_from_json({**base, "gpus": 3})
    one = ResourceSamples(2, ((DEFAULT, 1 << 20, 1e-3), (DEFAULT, 1 << 24, 5e-3)), ((DEFAULT, 1.5),), "H100", 1)
    with pytest.raises(CommschedError, match="different numbers of GPUs"):
        merge([one, ResourceSamples(2, (), (), "H100", 2)])
    with pytest.raises(CommschedError, match="different numbers of GPUs"):
        merge([one, ResourceSamples(2, (), (), "H100")])  # not recorded: one GPU per rank
    assert merge([one, ResourceSamples(2, (), (), "H100", 1)]).gpus == 1
    assert merge([ResourceSamples(2, (), ()), ResourceSamples(2, (), ())]).gpus is None
    cluster, _ = fit_resource_cluster(one, DEFAULT)
    assert "2 ranks sharing 1 GPU" in cluster.source
