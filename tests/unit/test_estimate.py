"""Estimated profiles, OSF Eq. 4-6, and the efficiency calibration on ResNet-50 / V100-SXM2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commsched.profile.devices import CALIBRATED_EFFICIENCY, REFERENCE_IMAGES_PER_S, Device, device
from commsched.errors import CommschedError
from commsched.models.inventory_types import GradTensor, ModelInventory
from commsched.profile.estimate import estimate_profile


def _inv(flops=(4e9, 0.0, 2e9, 1e9), batch_size=4) -> ModelInventory:
    tensors = tuple(
        GradTensor(name=f"layer{i}.weight", bytes=400 * (i + 1), numel=100 * (i + 1), dtype="float32", forward_flops=f)
        for i, f in enumerate(flops)
    )
    return ModelInventory(
        model="toy", batch_size=batch_size, tensors=tensors, forward_flops=float(sum(flops)),
        parameters=sum(t.numel for t in tensors),
    )


GPU = Device("toy-gpu", 10e12, "test")


def test_backward_is_twice_forward_per_tensor():
    p = estimate_profile(_inv(), GPU, 4, efficiency=0.5)
    achieved = 0.5 * 10e12
    assert p.forward_s == pytest.approx(7e9 / achieved)
    expected = [2 * 4e9 / achieved, 0.0, 2 * 2e9 / achieved, 2 * 1e9 / achieved]
    assert [t.backward_s for t in p.tensors] == pytest.approx(expected)
    assert p.backward_s == pytest.approx(2 * p.forward_s)  # OSF Eq. 6
    assert p.compute_s == pytest.approx(3 * p.forward_s)  # OSF Eq. 4


def test_profile_fields():
    p = estimate_profile(_inv(), GPU, 4)
    assert (p.model, p.device, p.source, p.batch_size) == ("toy", "toy-gpu", "estimated", 4)
    assert p.names == ("layer0.weight", "layer1.weight", "layer2.weight", "layer3.weight")
    assert [t.bytes for t in p.tensors] == [400, 800, 1200, 1600]
    assert p.tensors[1].backward_s == 0.0  # zero attributed FLOPs
    assert p.optimizer_s == 0.0


def test_batch_scaling_is_linear():
    inv = _inv(batch_size=4)
    at4 = estimate_profile(inv, GPU, 4)
    at8 = estimate_profile(inv, GPU, 8)
    at2 = estimate_profile(inv, GPU, 2)
    assert at8.forward_s == pytest.approx(2 * at4.forward_s)
    assert at8.compute_s == pytest.approx(2 * at4.compute_s)
    assert [t.backward_s for t in at8.tensors] == pytest.approx([2 * t.backward_s for t in at4.tensors])
    assert at2.compute_s == pytest.approx(at4.compute_s / 2)


def test_device_by_name_and_peak():
    inv = _inv()
    by_name = estimate_profile(inv, "v100-sxm2", 4)
    assert by_name.device == "V100-SXM2"
    slower = estimate_profile(inv, device("K80"), 4)
    assert slower.compute_s / by_name.compute_s == pytest.approx(15.7e12 / 4.37e12)


@pytest.mark.parametrize("efficiency", [0.0, -0.1, 1.01, float("nan"), float("inf"), True, "0.5"])
def test_bad_efficiency_raises(efficiency):
    with pytest.raises(CommschedError, match="efficiency"):
        estimate_profile(_inv(), GPU, 4, efficiency=efficiency)


def test_absurd_estimates_are_errors_naming_the_inputs():
    # 7e9 FLOPs at 1e-300 of 10 TFLOP/s: 2.1e288 s per iteration (and inf at 5e-324)
    for c in (1e-300, 5e-324):
        with pytest.raises(CommschedError, match=f"'toy' at batch 4 on toy-gpu with efficiency {c:g} is .* over the bound"):
            estimate_profile(_inv(), GPU, 4, efficiency=c)
    with pytest.raises(CommschedError, match="batch_size must be at most 2\\*\\*24"):
        estimate_profile(_inv(), GPU, 10**400)
    with pytest.raises(CommschedError, match="over the bound of 1e\\+06 s"):
        estimate_profile(_inv(), GPU, 2**24, efficiency=1e-3)  # 3 x 7e9 FLOPs x 2**22 / 1e10 FLOP/s: 8.8e6 s



def test_a_model_too_small_to_estimate_points_to_measuring():
    # 3 x 3 FLOPs at 10 TFLOP/s x 0.5: 1.8e-12 s, under the 1 ns a profile must compute for
    with pytest.raises(CommschedError, match="'toy' at batch 4 on toy-gpu is 1.8e-12 s .*\\(commsched profile --measure\\)"):
        estimate_profile(_inv(flops=(1.0, 2.0)), GPU, 4, efficiency=0.5, flop_rate=1.0)
    # just over 1 ns is a profile
    assert estimate_profile(_inv(flops=(2e3, 2e3)), GPU, 4, efficiency=0.5, flop_rate=1.0).compute_s > 1e-9

def test_efficiency_one_is_allowed():
    assert estimate_profile(_inv(), GPU, 4, efficiency=1.0).forward_s == pytest.approx(7e9 / 10e12)


@pytest.mark.parametrize("batch_size", [0, -1, 2.0, True])
def test_bad_batch_size_raises(batch_size):
    with pytest.raises(CommschedError, match="batch_size"):
        estimate_profile(_inv(), GPU, batch_size)


def test_bad_device_and_inventory_raise():
    with pytest.raises(CommschedError, match="'nope'"):
        estimate_profile(_inv(), "nope", 4)
    with pytest.raises(CommschedError, match="ModelInventory"):
        estimate_profile({"tensors": []}, GPU, 4)


def test_inventory_validation():
    t = GradTensor("w", 4, 1, "float32", 10.0)
    with pytest.raises(CommschedError, match="sum to 10.0"):
        ModelInventory("m", 1, (t,), forward_flops=11.0, parameters=1)
    with pytest.raises(CommschedError, match="parameters=2"):
        ModelInventory("m", 1, (t,), forward_flops=10.0, parameters=2)
    with pytest.raises(CommschedError, match="'w' twice"):
        ModelInventory("m", 1, (t, t), forward_flops=20.0, parameters=2)
    with pytest.raises(CommschedError, match="no gradient tensors"):
        ModelInventory("m", 1, (), forward_flops=0.0, parameters=0)
    with pytest.raises(CommschedError, match="forward_flops"):
        GradTensor("w", 4, 1, "float32", -1.0)
    with pytest.raises(CommschedError, match="bytes"):
        GradTensor("w", 0, 1, "float32", 1.0)


def test_packages_are_import_light():
    code = (
        "import sys, commsched.models, commsched.profile, commsched.profile.estimate, "
        "commsched.models.inventory_types; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def resnet50_inventory():
    zoo = pytest.importorskip("commsched.profile.zoo_profile")
    return zoo.zoo_inventory("resnet50")  # 224x224, batch 2


def test_calibration_resnet50_v100_sxm2_is_367_images_per_s(resnet50_inventory):
    # OSF Eq. 5 with c alone (flop_rate=1): 367 images/s at every batch
    for batch in (1, 32, 256):
        p = estimate_profile(resnet50_inventory, device("V100-SXM2"), batch, efficiency=CALIBRATED_EFFICIENCY, flop_rate=1.0)
        images_per_s = 1.0 / (p.compute_s / batch)
        assert images_per_s == pytest.approx(REFERENCE_IMAGES_PER_S, rel=1e-3)
        assert images_per_s == pytest.approx(367.0, rel=1e-3)
        assert p.backward_s == pytest.approx(2 * p.forward_s, rel=1e-12)
    # the default layer model: 367 at the measurement's batch (112); its weights' bytes, read once per
    # step, cost a little more per image at a small batch and a little less at a large one
    rates = {}
    for batch in (1, 32, 112, 256):
        p = estimate_profile(resnet50_inventory, device("V100-SXM2"), batch)
        rates[batch] = batch / p.compute_s
        assert p.backward_s == pytest.approx(2 * p.forward_s, rel=1e-12)
    assert rates[112] == pytest.approx(367.0, rel=1e-3)
    assert 0.9 * 367 < rates[1] < rates[32] < rates[112] < rates[256] < 1.01 * 367


def test_real_inventory_zero_flop_tensors(resnet50_inventory):
    p = estimate_profile(resnet50_inventory, "V100", 32)
    assert p.names == resnet50_inventory.names
    pairs = list(zip(resnet50_inventory.tensors, p.tensors))
    zero = [spec for t, spec in pairs if t.forward_flops == 0]
    assert zero and all(spec.backward_s == 0.0 for spec in zero)  # e.g. BatchNorm weights/biases
    assert all(spec.backward_s > 0 for t, spec in pairs if t.forward_flops > 0)


def test_zoo_profile():
    zoo = pytest.importorskip("commsched.profile.zoo_profile")
    p = zoo.zoo_profile("resnet18", 16, "V100", image_size=64)
    assert (p.model, p.batch_size, p.device, p.source) == ("resnet18", 16, "V100", "estimated")
    assert len(p.tensors) == 62 and p.names[0] == "fc.bias"
    assert p.backward_s == pytest.approx(2 * p.forward_s)
    halved = zoo.zoo_profile("resnet18", 16, "V100", image_size=64, efficiency=CALIBRATED_EFFICIENCY / 2)
    assert halved.compute_s == pytest.approx(2 * p.compute_s)
    with pytest.raises(CommschedError, match="'nope'"):
        zoo.zoo_profile("resnet18", 16, "nope")


@pytest.mark.parametrize("dtype, size", [("fp32", 4), ("fp16", 2), ("bf16", 2)])
def test_gradient_dtype_sets_bytes_from_elements_and_leaves_compute(dtype, size):
    base = estimate_profile(_inv(), GPU, 4)
    p = estimate_profile(_inv(), GPU, 4, dtype=dtype)
    assert [t.bytes for t in p.tensors] == [100 * (i + 1) * size for i in range(4)]
    assert [t.backward_s for t in p.tensors] == [t.backward_s for t in base.tensors]
    assert p.forward_s == base.forward_s


def test_bad_gradient_dtype_is_named():
    with pytest.raises(CommschedError, match="gradient dtype must be one of fp32, fp16, bf16, got 'fp8'"):
        estimate_profile(_inv(), GPU, 4, dtype="fp8")
