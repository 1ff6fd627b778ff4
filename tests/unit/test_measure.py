"""Measured profiles (MG-WFBP Section 5.1): timed gradient-ready hooks of real CPU training steps.

Timing assertions use generous factors: the suite runs on shared, loaded CPUs.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from commsched.errors import CommschedError
from commsched.formats.io import profile_from_json, profile_to_json
from commsched.models.inventory import inventory
from commsched.profile.measure import measure_device, measure_profile, measure_zoo_profile

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a loaded 2-CPU box an OpenMP barrier can stall a tiny kernel for tens of ms."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def _validate_schema(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json.loads((SCHEMAS / "profile.v1.json").read_text())).validate(doc)


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _check_profile(profile, module, inputs, loss_fn=None):
    doc = profile_to_json(profile)
    _validate_schema(doc)
    assert profile_from_json(json.loads(json.dumps(doc))) == profile
    assert profile.source == "measured"
    assert profile.device == "cpu"
    assert profile.optimizer_s == 0.0
    assert profile.forward_s > 0
    assert all(t.backward_s >= 0 for t in profile.tensors)
    inv = inventory(module, inputs, loss_fn=loss_fn)
    assert profile.names == tuple(t.name for t in inv.tensors)
    assert [t.bytes for t in profile.tensors] == [t.bytes for t in inv.tensors]


def test_mlp_profile_is_valid_and_in_hook_order():
    model = mlp()
    x = torch.randn(8, 32)
    profile = measure_profile(model, (x,), name="mlp", warmup=2, iters=5)
    assert profile.model == "mlp" and profile.batch_size == 8
    _check_profile(profile, model, (x,))
    # torch 2.14 on the CPU: a Linear's bias is ready before its weight, last layer first.
    assert profile.names == ("4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight")


def test_resnet18_profile_is_valid_and_state_is_restored():
    from commsched.models.zoo import build_model, example_input

    torch.manual_seed(0)
    model = build_model("resnet18")
    model.eval()
    model.layer1.train()  # a mixed state must come back exactly
    inputs = example_input("resnet18", 2, 32)
    before = _snapshot(model)
    modes = {n: m.training for n, m in model.named_modules()}
    profile = measure_profile(model, inputs, name="resnet18", warmup=1, iters=3)
    assert {n: m.training for n, m in model.named_modules()} == modes
    after = _snapshot(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)  # parameters and BatchNorm buffers
    assert all(p.grad is None for p in model.parameters())
    assert len(profile.tensors) == 62
    _check_profile(profile, model, inputs)


def test_measure_zoo_profile():
    profile = measure_zoo_profile("resnet18", 2, image_size=32, warmup=1, iters=2)
    assert profile.model == "resnet18" and profile.batch_size == 2 and profile.source == "measured"
    assert profile.names[:2] == ("fc.bias", "fc.weight")
    with pytest.raises(CommschedError, match="unknown zoo model"):
        measure_zoo_profile("resnet19", 2, warmup=0, iters=1)


def test_measured_profile_says_it_ran_on_the_cpu():
    profile = measure_zoo_profile("resnet18", 2, image_size=32, device="cpu", warmup=0, iters=1)
    assert profile.device == "cpu"


@pytest.mark.parametrize(
    "spec, available, count, expected",
    [
        (None, True, 1, "cuda"),  # a GPU machine measures its GPU unless told otherwise
        (None, False, 0, "cpu"),
        ("cpu", True, 1, "cpu"),
        ("CUDA", True, 1, "cuda"),
        ("cuda:1", True, 2, "cuda:1"),
    ],
)
def test_measure_device_choice(spec, available, count, expected):
    assert str(measure_device(spec, cuda_available=available, cuda_count=count)) == expected


@pytest.mark.parametrize(
    "spec, available, count, match",
    [
        ("cuda", False, 0, r"'cuda': this machine has no CUDA device"),
        ("cuda:0", False, 0, "no CUDA device"),
        ("cuda:2", True, 2, r"has 2 CUDA device\(s\)"),
        ("V100", True, 1, "'cpu', 'cuda' or 'cuda:N', got 'V100'"),
        ("cuda:x", True, 1, "got 'cuda:x'"),
    ],
)
def test_measure_device_errors_name_the_device(spec, available, count, match):
    with pytest.raises(CommschedError, match=match):
        measure_device(spec, cuda_available=available, cuda_count=count)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_measure_zoo_profile_refuses_cuda_without_a_gpu():
    with pytest.raises(CommschedError, match="no CUDA device"):
        measure_zoo_profile("resnet18", 2, image_size=32, device="cuda", warmup=0, iters=1)


@pytest.mark.cuda
def test_measure_zoo_profile_runs_on_cuda_by_default():
    # bert_small needs no torchvision, which a GPU machine may lack (resnet18 would fail there)
    profile = measure_zoo_profile("bert_small", 4, warmup=1, iters=3)
    assert profile.device == torch.cuda.get_device_name()
    cpu = measure_zoo_profile("bert_small", 4, device="cpu", warmup=0, iters=1)
    assert profile.names == cpu.names  # same ready order on both devices


def test_sum_of_backward_is_close_to_a_separately_timed_backward():
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 8))
    x = torch.randn(64, 256)
    profile = measure_profile(model, (x,), warmup=3, iters=15)
    times = []
    for _ in range(15):
        model.zero_grad(set_to_none=True)
        loss = model(x).mean()
        start = time.perf_counter()
        loss.backward()
        times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    separate = statistics.median(times)
    # Medians of deltas do not add up to the median backward, and the last hook fires a little before
    # backward() returns; a factor of 4 either way still catches a wrong clock or missing deltas.
    assert separate / 4 < profile.backward_s < separate * 4


def test_heavy_layer_has_the_larger_backward_time():
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("heavy", nn.Linear(1024, 2048))
    model.add_module("act", nn.ReLU())
    model.add_module("tiny", nn.Linear(2048, 2))
    x = torch.randn(128, 1024)
    profile = measure_profile(model, (x,), warmup=2, iters=7)
    per_layer = {"heavy": 0.0, "tiny": 0.0}
    for t in profile.tensors:
        per_layer[t.name.split(".")[0]] += t.backward_s
    # heavy's weight gradient is a 2048x128 @ 128x1024 product (0.5 GFLOP); tiny's work is ~1 MFLOP.
    assert per_layer["heavy"] > 3 * per_layer["tiny"], profile.tensors


class WithUnused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.used(self.frozen(x))


def test_unused_and_frozen_parameters_are_left_out():
    profile = measure_profile(WithUnused(), (torch.randn(3, 4),), warmup=0, iters=2)
    assert profile.names == ("used.bias", "used.weight")


def test_tied_parameters_appear_once():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    profile = measure_profile(Tied(), (torch.randn(3, 4),), warmup=0, iters=2)
    assert profile.names == ("a.weight",)


def test_existing_grads_are_restored():
    model = mlp()
    for p in model.parameters():
        p.grad = torch.full_like(p, 7.0)
    measure_profile(model, (torch.randn(4, 32),), warmup=0, iters=1)
    assert all(torch.equal(p.grad, torch.full_like(p, 7.0)) for p in model.parameters())


class Switching(nn.Module):
    """Takes branch a on its first call and branch b afterwards: the backward graph changes."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.a(x) if self.calls == 1 else self.b(x)


def test_changing_order_between_iterations_names_the_tensor():
    model = Switching()
    model.eval()
    with pytest.raises(CommschedError, match=r"'a\.bias'.*iteration 2"):
        measure_profile(model, (torch.randn(2, 4),), warmup=0, iters=2)
    assert model.training is False  # restored even on failure
    assert all(p.grad is None for p in model.parameters())


def test_sequential_mode_and_progress_run_on_cpu(capsys):
    profile = measure_profile(mlp(), (torch.randn(4, 32),), warmup=1, iters=2, sequential=True, progress=True)
    assert profile.names[0] == "4.bias"
    assert capsys.readouterr().out == ""  # the bar goes to stderr


def test_custom_loss_batch_size_and_device_label():
    model = mlp()
    x = torch.randn(4, 32)
    profile = measure_profile(
        model, (x,), lambda out: (out**2).sum(), batch_size=32, device_label="EPYC", warmup=0, iters=1
    )
    assert profile.batch_size == 32 and profile.device == "EPYC"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"iters": 0}, "iters"),
        ({"warmup": -1}, "warmup"),
        ({"batch_size": 0}, "batch_size"),
        ({"loss_fn": lambda out: out}, "scalar"),
    ],
)
def test_bad_arguments_are_errors(kwargs, match):
    with pytest.raises(CommschedError, match=match):
        measure_profile(mlp(), (torch.randn(4, 32),), **kwargs)


def test_inputs_must_be_tensors_a_tuple_or_keywords_and_model_must_train():
    with pytest.raises(CommschedError, match="a tensor, a tuple of positional inputs or a dict of keyword inputs, got int"):
        measure_profile(mlp(), 4)
    with pytest.raises(CommschedError, match="need names"):
        measure_profile(mlp(), {1: torch.randn(4, 32)})
    frozen = mlp().requires_grad_(False)
    with pytest.raises(CommschedError, match="no trainable parameters"):
        measure_profile(frozen, (torch.randn(4, 32),))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_profile_uses_events():
    model = mlp().cuda()
    x = torch.randn(8, 32, device="cuda")
    for sequential in (False, True):
        profile = measure_profile(model, (x,), warmup=2, iters=5, sequential=sequential)
        assert profile.device == torch.cuda.get_device_name()
        assert profile.forward_s > 0 and all(t.backward_s >= 0 for t in profile.tensors)
        assert profile.names == tuple(t.name for t in inventory(model, (x,)).tensors)
