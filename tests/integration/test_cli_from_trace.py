"""``commsched profile --from-trace`` end to end, in real subprocesses: a trace recorded here by
torch.profiler on the CPU, GPU-style traces with NCCL all-reduces, a job without a model planned from
its trace alone, and the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commsched.formats.io import load_cluster, load_profile

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commsched", *args], capture_output=True, text=True, timeout=300)


def record_cpu_trace(path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from commsched.models.inventory import sum_of_means
    from commsched.models.zoo import build_model, example_input

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model("resnet18")
    (x,) = example_input("resnet18", 4, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(4):
            opt.zero_grad()
            sum_of_means(model(x)).backward()
            opt.step()
            prof.step()
    prof.export_chrome_trace(str(path))


def test_from_a_cpu_trace_recorded_here(tmp_path):
    trace = tmp_path / "trace.json"
    record_cpu_trace(trace)
    r = run("profile", "--from-trace", str(trace), "--model", "resnet18", "--batch-size", "4", "--image-size", "32",
            "--out", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert "median of 2 steps (host clock); 9 matched by a unique shape, 53 by order" in r.stderr
    assert "note: no all-reduce in the trace: no cluster" in r.stderr
    p = load_profile(tmp_path / "p.json")
    assert p.source == "measured" and p.device == "cpu" and p.batch_size == 4 and len(p.tensors) == 62
    assert p.names[:2] == ("fc.bias", "fc.weight") and p.names[-1] == "conv1.weight"
    assert p.forward_s > 0 and p.backward_s > 0
    assert not (tmp_path / "p-cluster.json").exists()


def test_a_model_by_import_path_names_a_traces_gradients_is_measured_and_estimated(tmp_path):
    """The user's own model as package.module:factory (inputs by keyword): --from-trace names the
    trace's gradients after the model the factory builds, as the zoo name does, --measure profiles
    it here, and without --measure it is estimated (and planned) as the zoo's are."""
    (tmp_path / "myjob.py").write_text(
        "import torch, torchvision\n"
        "class ByKeyword(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.net = torchvision.models.resnet18(weights=None)\n"
        "    def forward(self, pixel_values):\n"
        "        return self.net(pixel_values)\n"
        "def resnet(batch_size, image_size):\n"
        "    return torchvision.models.resnet18(weights=None), torch.randn(batch_size, 3, image_size, image_size), lambda out: out.mean()\n"
        "def by_keyword(batch_size):\n"
        "    return ByKeyword(), {'pixel_values': torch.randn(batch_size, 3, 32, 32)}, lambda out: out.mean()\n"
    )
    trace = tmp_path / "trace.json"
    record_cpu_trace(trace)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "commsched", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)

    r = cli("profile", "--from-trace", str(trace), "--model", "myjob:resnet", "--batch-size", "4", "--image-size", "32", "--out", "p.json")
    assert r.returncode == 0, r.stderr
    assert "9 matched by a unique shape, 53 by order" in r.stderr
    p = load_profile(tmp_path / "p.json")
    assert p.model == "myjob:resnet" and p.batch_size == 4 and len(p.tensors) == 62
    assert p.names[:2] == ("fc.bias", "fc.weight") and p.names[-1] == "conv1.weight"
    r = cli("profile", "--model", "myjob:by_keyword", "--batch-size", "2", "--measure", "--iters", "2", "--warmup", "1", "--out", "m.json")
    assert r.returncode == 0, r.stderr
    m = load_profile(tmp_path / "m.json")
    assert m.source == "measured" and m.batch_size == 2 and len(m.tensors) == 62 and m.names[-1] == "net.conv1.weight"
    # estimated as a zoo model is, from its FLOPs on a GPU preset, and planned for a cluster
    r = cli("profile", "--model", "myjob:by_keyword", "--batch-size", "64", "--device", "V100", "--out", "e.json")
    assert r.returncode == 0, r.stderr
    e = load_profile(tmp_path / "e.json")
    assert e.source == "estimated" and e.batch_size == 64 and e.device == "V100" and e.names == m.names
    zoo = run("profile", "--model", "resnet18", "--batch-size", "64", "--image-size", "32", "--device", "V100", "--out", str(tmp_path / "z.json"))
    assert zoo.returncode == 0, zoo.stderr
    assert e.forward_s == pytest.approx(load_profile(tmp_path / "z.json").forward_s, rel=1e-6)  # the same network, the same FLOPs
    r = cli("plan", "--model", "myjob:resnet", "--batch-size", "64", "--image-size", "32", "--cluster", "v100-10gbe", "--workers", "16", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["strategies"]["optimal"]["buckets"]) >= 1


def test_sequence_numbers_find_the_forward_torch_s_flows_mark(tmp_path):
    """On a real trace (torch here, CPU): without its fwdbwd flows, the forward ops found from the ops'
    sequence numbers (what older torch gives) are the ones the flows mark, so every step reads the same."""
    from commsched.profile.from_trace import load_trace, parse_trace

    trace = tmp_path / "trace.json"
    record_cpu_trace(trace)
    doc = load_trace(trace)
    assert any(e.get("cat") == "fwdbwd" for e in doc["traceEvents"])
    flows = parse_trace(doc)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "fwdbwd"]
    numbers = parse_trace(doc)
    assert (flows.forward_from, numbers.forward_from) == ("fwdbwd flows", "sequence numbers")
    assert numbers.steps == flows.steps and len(flows.steps) == 2


def test_without_a_model_the_trace_alone_plans_end_to_end(tmp_path):
    """A job whose model commsched does not have: no --model, no --batch-size. The gradients are named
    by position and shape, bytes from the trace; the profile and its cluster plan, and the DDP caps
    (bytes) come out."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_nccl_trace.json"
    out = tmp_path / "p.json"
    r = run("profile", "--from-trace", str(fixture), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "gpu_nccl_trace: 6 gradient tensors" in r.stderr and "6 named by position and shape (no --model)" in r.stderr
    assert "all-reduce table: 4 workers, 2 sizes from device kernel durations" in r.stderr
    assert "note: no --batch-size: the profile records batch 1" in r.stderr
    p = load_profile(out)
    assert p.names == ("grad.000[4x8]", "grad.001[4]", "grad.002[8x8]", "grad.003[8]", "grad.004[8]", "grad.005[8x8]")
    assert p.batch_size == 1 and p.model == "gpu_nccl_trace" and p.device == "NVIDIA A100-SXM4-80GB"
    cluster = tmp_path / "p-cluster.json"
    assert load_cluster(cluster).workers == 4
    r = run("plan", "--profile", str(out), "--cluster", str(cluster), "--out", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "d" / "plan.json").read_text())
    ddp = json.loads((tmp_path / "d" / "ddp_options.json").read_text())
    assert sum(ddp["bucket_bytes"]) == p.total_bytes == 720
    assert ddp["kwargs"]["bucket_cap_mb_list"] == [b / 2**20 for b in ddp["bucket_bytes"]]
    named = [n for b in plan["buckets"] for n in b["tensors"]]
    assert sorted(named) == sorted(p.names)


def nccl_trace(shapes: list[tuple[int, ...]], buckets: list[tuple[int, list[float]]]) -> dict:
    """Two steps of a GPU job: one forward op, the backward's AccumulateGrads 10 us apart, and per
    bucket (number of gradients, kernel time per step in us) a record_param_comms op and its NCCL kernel."""
    events: list[dict] = []

    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})

    for k in range(2):
        s = 1e6 + 1e5 * k
        x("user_annotation", f"ProfilerStep#{k}", s, 9e4)
        x("cpu_op", "aten::conv2d", s + 100, 900)
        events.append({"ph": "s", "id": k + 1, "pid": 1, "tid": 1, "ts": s + 100, "cat": "fwdbwd", "name": "fwdbwd"})
        x("cpu_op", "autograd::engine::evaluate_function: ConvolutionBackward0", s + 1000, 5, tid=2)
        t, i = s + 1010, 0
        for count, times in buckets:
            for shape in shapes[i:i + count]:
                x("cpu_op", "torch::autograd::AccumulateGrad", t, 2, tid=2, **{"Input Dims": [list(shape)], "Input type": ["float"]})
                t += 10
            nelems = sum(int(__import__("math").prod(sh)) for sh in shapes[i:i + count])
            ext = int(s) + i
            x("cpu_op", "record_param_comms", t, 3, tid=2, **{"External id": ext, "Collective name": "allreduce",
                                                              "dtype": "Float", "In msg nelems": nelems, "Group size": 8})
            x("kernel", NCCL_KERNEL, t + 50, times[k], pid=0, tid=20, **{"External id": ext, "correlation": ext})
            i += count
    return {"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": events}


def test_from_a_gpu_trace_writes_the_table_cluster(tmp_path):
    from commsched.profile.from_trace import zoo_params

    params = zoo_params("alexnet")  # 16 gradient tensors, classifier first
    trace = tmp_path / "gpu.json"
    # three buckets: the last classifier layer, the rest of the classifier, the features
    trace.write_text(json.dumps(nccl_trace([p.shape for p in params], [(2, [30.0, 50.0]), (4, [900.0, 1100.0]), (10, [400.0, 600.0])])))
    out, cluster = tmp_path / "p.json", tmp_path / "c.json"
    r = run("profile", "--from-trace", str(trace), "--model", "alexnet", "--batch-size", "32", "--out", str(out),
            "--cluster-out", str(cluster))
    assert r.returncode == 0, r.stderr
    assert "all-reduce table: 8 workers, 3 sizes from device kernel durations" in r.stderr
    p = load_profile(out)
    assert p.names == tuple(q.name for q in params) and p.device == "NVIDIA H100 80GB HBM3"
    assert [t.backward_s for t in p.tensors][1:] == pytest.approx([10e-6] * 15)
    c = load_cluster(cluster)
    sizes = [sum(q.bytes for q in params[:2]), sum(q.bytes for q in params[2:6]), sum(q.bytes for q in params[6:])]
    # medians 40, 1000 and 500 us by size; the features' bucket is the smallest of the three...
    order = sorted(zip(sizes, [40e-6, 1000e-6, 500e-6]))
    assert [b for b, _ in order] == [sizes[2], sizes[0], sizes[1]]
    # ... at 500 us it costs more than the 40 us of the larger last-layer bucket: pooled to their mean
    doc = json.loads(cluster.read_text())
    points = doc["allreduce"]["points"]
    assert [b for b, _ in points] == [1, sizes[2], sizes[0], sizes[1]]
    assert [s for _, s in points] == pytest.approx([270e-6, 270e-6, 270e-6, 1000e-6])
    assert c.workers == 8 and doc["time_source"] == "device kernel"
    # the default cluster path is next to --out
    r = run("profile", "--from-trace", str(trace), "--model", "alexnet", "--batch-size", "32", "--out", str(tmp_path / "q.json"))
    assert r.returncode == 0, r.stderr
    assert load_cluster(tmp_path / "q-cluster.json").allreduce == c.allreduce


@pytest.mark.parametrize(
    "content, extra, message",
    [
        ('{"not": "a trace"}', (), "not a Chrome trace (expected an object with a 'traceEvents' list)"),
        ("[1, 2", (), "malformed JSON at line 1"),
        ('{"traceEvents": []}', (), "no ProfilerStep#N annotation"),
        ('{"traceEvents": []}', ("--measure",), "--from-trace and --measure are exclusive"),
        ("GPU", (), "AccumulateGrad events per step but model 'resnet18' has 62 gradient tensors"),
    ],
)
def test_errors_are_one_line(tmp_path, content, extra, message):
    trace = tmp_path / "t.json"
    if content == "GPU":  # alexnet's gradients offered as resnet18's
        from commsched.profile.from_trace import zoo_params

        content = json.dumps(nccl_trace([p.shape for p in zoo_params("alexnet")], [(16, [5.0, 5.0])]))
    trace.write_text(content)
    r = run("profile", "--from-trace", str(trace), "--model", "resnet18", "--batch-size", "4", *extra, "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert not (tmp_path / "p.json").exists()


def test_option_errors(tmp_path):
    r = run("profile", "--from-trace", "t.json", "--model", "resnet18", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "--from-trace needs --batch-size" in r.stderr
    r = run("profile", "--from-trace", "t.json", "--image-size", "32", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "--image-size goes with --model" in r.stderr
    r = run("profile", "--model", "resnet18", "--cluster-out", "c.json", "--out", str(tmp_path / "p.json"))
    assert r.returncode == 2 and "--cluster-out goes with --from-trace" in r.stderr
    for extra in (["--efficiency", "0.5"], ["--iters", "3"], ["--warmup", "1"], ["--sequential"]):
        r = run("profile", "--from-trace", "t.json", "--model", "resnet18", "--batch-size", "4", *extra, "--out", str(tmp_path / "p.json"))
        assert r.returncode == 2 and f"{extra[0]} does not apply to --from-trace" in r.stderr, r.stderr
