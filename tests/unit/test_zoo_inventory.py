"""Zoo models and their inventories, on real torch models (CPU, random weights)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from commsched.profile.devices import REFERENCE_FORWARD_FLOPS_PER_IMAGE
from commsched.errors import CommschedError
from commsched.models.inventory import flop_counter, inventory
from commsched.models.zoo import ZOO_MODELS, build_model, example_input, training_loss

# Gradient tensors per model in training mode (aux heads of googlenet/inception_v3 included).
EXPECTED_TENSORS = {
    "resnet18": 62,
    "resnet50": 161,
    "resnet101": 314,
    "resnet152": 467,
    "vgg16": 32,
    "vgg16_nin": 30,  # VGG-16's 26 convolution tensors + two 1x1 convolutions
    "vgg19": 38,
    "alexnet": 16,
    "googlenet": 187,
    "densenet121": 364,
    "densenet161": 484,
    "densenet201": 604,
    "inception_v3": 292,
    "mobilenet_v2": 158,
    "convnext_tiny": 182,  # 18 blocks x 9 (depthwise conv 2, LayerNorm 2, two linears 4, layer scale 1) + stem 4 + downsampling 12 + head 4
    # stem 3 + the first MBConv (depthwise 3, squeeze-excitation 4, projection 3) 10 + 15 MBConv x 13
    # (expansion 3 more) + head 3 + classifier 2
    "efficientnet_b0": 213,
    # 12 Swin blocks x 13 (LayerNorm 4, qkv and projection 4, relative position bias 1, MLP 4) + patch
    # embedding 4 + three patch mergings x 3 + final norm 2 + head 2
    "swin_t": 173,
    "vit_b_16": 152,
    "bert_base": 152,
    "bert_small": 56,  # 4 layers x 12 tensors + 2 embeddings + LayerNorm 2 + pooler 2 + classifier 2
}
# Smallest sizes that keep the test fast; vit_b_16's position embedding fixes 224, inception_v3's
# auxiliary head needs its 17x17 grid (299), bert_base takes token ids.
IMAGE_SIZE = {"vit_b_16": 224, "inception_v3": 299, "bert_base": None, "bert_small": None}


def _inventory(name: str, batch: int = 2, image_size: int | None = 64):
    torch.manual_seed(0)
    model = build_model(name)
    size = IMAGE_SIZE.get(name, image_size)
    inv = inventory(model, example_input(name, batch, size), loss_fn=lambda out: training_loss(name, out), name=name)
    return model, inv


@pytest.fixture(scope="module")
def resnet50_224():
    """resnet50 at 224x224, batch 1, plus an independent FlopCounterMode run of its forward."""
    model, inv = _inventory("resnet50", batch=1, image_size=224)
    with FlopCounterMode(display=False) as counter:
        model(*example_input("resnet50", 1, 224))
    return model, inv, counter


def test_resnet50_tensors_and_parameters(resnet50_224):
    _, inv, _ = resnet50_224
    assert len(inv.tensors) == 161
    assert inv.parameters == 25_557_032
    assert inv.total_bytes == 4 * 25_557_032
    assert all(t.dtype == "float32" and t.bytes == 4 * t.numel for t in inv.tensors)
    assert inv.tensors[0].name == "fc.bias" and inv.tensors[-1].name == "conv1.weight"


def test_resnet50_forward_is_4_1_gmacs(resnet50_224):
    _, inv, _ = resnet50_224
    assert inv.batch_size == 1
    assert inv.forward_flops / 2 / 1e9 == pytest.approx(4.1, rel=0.03)


def test_calibration_constant_matches_counter(resnet50_224):
    _, inv, counter = resnet50_224
    # devices.CALIBRATED_EFFICIENCY is derived from this constant; it must not drift from torch.
    assert counter.get_total_flops() == REFERENCE_FORWARD_FLOPS_PER_IMAGE
    assert inv.forward_flops == REFERENCE_FORWARD_FLOPS_PER_IMAGE


def test_per_tensor_flops_sum_to_counter_total(resnet50_224):
    _, inv, counter = resnet50_224
    assert sum(t.forward_flops for t in inv.tensors) == counter.get_total_flops()
    per_module = counter.get_flop_counts()
    by_name = {t.name: t.forward_flops for t in inv.tensors}
    # Leaf layers keep exactly their own FLOPs, matched with the counter's FQN-keyed table.
    assert by_name["conv1.weight"] == sum(per_module["ResNet.conv1"].values())
    assert by_name["fc.bias"] == sum(per_module["ResNet.fc"].values())
    assert by_name["fc.weight"] == 0.0  # bias of fc is ready first and carries the layer


def test_bert_flops_include_functional_attention():
    model, inv = _inventory("bert_base", batch=1)
    with FlopCounterMode(display=False) as counter:
        model.train()(*example_input("bert_base", 1))
    assert sum(t.forward_flops for t in inv.tensors) == counter.get_total_flops() == inv.forward_flops
    by_name = {t.name: t.forward_flops for t in inv.tensors}
    per_module = counter.get_flop_counts()
    attn = sum(per_module["BertBase.encoder.layers.0.self_attn"].values())
    # MultiheadAttention applies in_proj, attention and out_proj functionally: all of it lands on its
    # own first-ready parameter, none on the never-called out_proj module.
    assert by_name["encoder.layers.0.self_attn.in_proj_bias"] == attn
    assert by_name["encoder.layers.0.self_attn.out_proj.weight"] == 0.0
    assert by_name["encoder.layers.0.self_attn.out_proj.bias"] == 0.0


def test_vit_b_16_matches_torchvision_published_gflops():
    _, inv = _inventory("vit_b_16", batch=1)
    published_gmacs = torchvision.models.ViT_B_16_Weights.IMAGENET1K_V1.meta["_ops"]  # 17.564
    # Needs the CPU flash-attention formula of flop_counter(); without it ~4% is missing.
    assert inv.forward_flops / 2 / 1e9 == pytest.approx(published_gmacs, rel=1e-3)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_model_inventory(name):
    model, inv = _inventory(name)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(inv.tensors) == EXPECTED_TENSORS[name]
    assert len(set(inv.names)) == len(inv.names)
    assert sorted(inv.names) == sorted(trainable)
    assert inv.parameters == sum(p.numel() for p in model.parameters())
    assert sum(t.forward_flops for t in inv.tensors) == inv.forward_flops > 0
    assert inv.batch_size == 2 and inv.model == name


class _Shuffled(nn.Module):
    """Layers registered head-first, so parameters() order is not the reverse of backward order."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 2)
        self.body = nn.Linear(4, 8)
        self.stem = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(self.stem(x))))


def _layers(names):
    return list(dict.fromkeys(n.rsplit(".", 1)[0] for n in names))


def test_ready_order_comes_from_hooks():
    model = _Shuffled()
    inv = inventory(model, (torch.randn(3, 4),))
    reversed_params = [n for n, _ in model.named_parameters()][::-1]
    assert _layers(reversed_params) == ["stem", "body", "head"]
    assert _layers(inv.names) == ["head", "body", "stem"]  # true backward order
    assert list(inv.names) != reversed_params
    assert sorted(inv.names) == sorted(reversed_params)


def test_ready_order_branching_model():
    # googlenet's aux heads are registered last but become ready in the middle of backward.
    _, inv = _inventory("googlenet")
    layers = _layers(inv.names)
    assert layers[:2] == ["fc", "inception5b.branch4.1.bn"]
    assert layers.index("aux2.fc2") > layers.index("inception4e.branch1.bn")
    assert layers[-1] == "conv1.conv"


class _Functional(nn.Module):
    """A parameter-free leaf with FLOPs, and a matmul in the parent's own forward."""

    class Gram(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ x.T @ x

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.gram = self.Gram()
        self.last = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.gram(self.first(x))
        return self.last(y @ torch.ones(4, 4))


def test_flops_of_parameter_free_code_are_kept():
    model = _Functional()
    x = torch.randn(5, 4)
    inv = inventory(model, (x,))
    with FlopCounterMode(display=False) as counter:
        model(x)
    total = counter.get_total_flops()
    by_name = {t.name: t.forward_flops for t in inv.tensors}
    linear = 2 * 5 * 4 * 4
    gram = 2 * 5 * 4 * 5 + 2 * 5 * 5 * 4
    functional = 2 * 5 * 4 * 4
    assert inv.forward_flops == total == 2 * linear + gram + functional
    # The leaf goes to the parameter owner run just before it; the root's own matmul to the root's
    # first-ready parameter (last.bias).
    first_ready_of_first = next(n for n in inv.names if n.startswith("first."))
    assert by_name[first_ready_of_first] == linear + gram
    assert by_name["last.bias"] == linear + functional
    assert sum(by_name.values()) == total


def test_frozen_and_unused_parameters_are_excluded():
    model = _Shuffled()
    model.stem.weight.requires_grad_(False)
    model.unused = nn.Linear(4, 4)
    inv = inventory(model, (torch.randn(3, 4),))
    assert "stem.weight" not in inv.names
    assert not any(n.startswith("unused.") for n in inv.names)
    left_out = ("stem.weight", "unused.weight", "unused.bias")
    assert inv.parameters == sum(p.numel() for n, p in model.named_parameters() if n not in left_out)
    by_name = {t.name: t.forward_flops for t in inv.tensors}
    assert by_name["stem.bias"] == 2 * 3 * 4 * 4  # still carries its layer's FLOPs

    for p in model.stem.parameters():
        p.requires_grad_(False)
    inv = inventory(model, (torch.randn(3, 4),))
    assert _layers(inv.names) == ["head", "body"]
    # A fully frozen first layer has no owner before it: its FLOPs go to the next one (body).
    assert sum(t.forward_flops for t in inv.tensors) == inv.forward_flops == 2 * 3 * (4 * 4 + 4 * 8 + 8 * 2)


def test_inventory_restores_module_state():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2)).eval()
    model(torch.randn(2, 3, 8, 8))  # materialise the lazy layer
    before = {k: v.clone() for k, v in model.state_dict().items()}
    inventory(model, (torch.randn(2, 3, 8, 8),))
    assert not model.training and not model[1].training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_flop_counter_counts_cpu_flash_attention():
    q = torch.randn(1, 2, 16, 8)
    with flop_counter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert counter.get_total_flops() == 2 * (2 * 1 * 2 * 16 * 16 * 8)


@pytest.mark.parametrize("batch_first", [True, False])
def test_flop_counter_counts_the_cpu_lstm_layer(batch_first):
    """nn.LSTM runs as aten.mkldnn_rnn_layer on the CPU, which torch's counter does not know: an
    LSTM got no compute, so its gradients were estimated free (a probe of an unseen model)."""
    lstm = nn.LSTM(64, 128, num_layers=2, batch_first=batch_first)
    x = torch.randn(4, 16, 64) if batch_first else torch.randn(16, 4, 64)
    with flop_counter() as counter:
        lstm(x)
    per_step = 4 * 128 * (64 + 128) + 4 * 128 * (128 + 128)  # the two layers' gate weights
    assert counter.get_total_flops() == 2 * 4 * 16 * per_step
    model = nn.Sequential(nn.LSTM(64, 128, batch_first=True))
    inv = inventory(_FirstOutput(model), torch.randn(4, 16, 64), lambda out: out.sum())
    with flop_counter() as counter:
        model(torch.randn(4, 16, 64))
    assert counter.get_total_flops() > 0
    assert sum(t.forward_flops for t in inv.tensors) == pytest.approx(counter.get_total_flops())


class _FirstOutput(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)[0]


def test_example_input_shapes():
    (x,) = example_input("inception_v3", 2)
    assert x.shape == (2, 3, 299, 299)
    (x,) = example_input("resnet50", 3)
    assert x.shape == (3, 3, 224, 224) and x.dtype == torch.float32
    (ids,) = example_input("bert_base", 2)
    assert ids.shape == (2, 128) and ids.dtype == torch.int64
    assert torch.equal(example_input("resnet18", 1, 32)[0], example_input("resnet18", 1, 32)[0])


@pytest.mark.parametrize(
    "call", [build_model, lambda n: example_input(n, 1), lambda n: training_loss(n, torch.zeros(1))]
)
def test_unknown_model_name_raises(call):
    with pytest.raises(CommschedError, match="'resnet51'.*resnet50"):
        call("resnet51")


def test_bad_inputs_raise():
    with pytest.raises(CommschedError, match="batch_size"):
        example_input("resnet50", 0)
    with pytest.raises(CommschedError, match="image_size"):
        example_input("bert_base", 1, 224)
    with pytest.raises(CommschedError, match="trainable"):
        inventory(nn.ReLU(), (torch.randn(2, 2),))


def test_inputs_beyond_the_bounds_or_the_machine_are_errors(monkeypatch):
    with pytest.raises(CommschedError, match="image_size must be at most 8192"):
        example_input("resnet18", 2, 10_000_000)
    with pytest.raises(CommschedError, match="batch_size must be at most 2\\*\\*24"):
        example_input("resnet18", 2**24 + 1)
    # within each bound, but 64 x 3 x 8192 x 8192 x 4 bytes = 48 GiB of input
    with pytest.raises(CommschedError, match="64x3x8192x8192 takes 48 GiB, over the bound of 2 GiB"):
        example_input("resnet18", 64, 8192)
    with pytest.raises(CommschedError, match="4194304x128 takes 4 GiB"):
        example_input("bert_small", 2**22)

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory\nmore")

    monkeypatch.setattr(torch, "randn", no_memory)
    with pytest.raises(CommschedError, match="cannot allocate an input of shape 2x3x224x224 .*can't allocate memory$"):
        example_input("resnet18", 2)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_meta_device_inventory_equals_the_cpu_one(name):
    # zoo_profile inventories on the meta device for speed; the order, shapes and FLOPs must be the
    # ones a real CPU backward gives (googlenet: aux heads; bert_small: post-norm layer order).
    from commsched.profile.zoo_profile import zoo_inventory

    size = IMAGE_SIZE.get(name, 64)
    meta = zoo_inventory(name, image_size=size)
    cpu = zoo_inventory(name, image_size=size, on_device="cpu")
    assert meta == cpu
    assert [t.name for t in meta.tensors] == [t.name for t in cpu.tensors]
    assert meta.forward_flops > 0


def test_vgg16_nin_is_osf_table_3s_layer_replacement():
    """OSF Table 3: the fully connected layers (392, 64, 15.6 MB) give way to 1x1 convolutions of
    1 MB and 1.95 MB and a global average pooling without parameters; the features stay VGG-16's."""
    vgg, nin = build_model("vgg16"), build_model("vgg16_nin")
    sizes = {n: p.numel() * p.element_size() for n, p in nin.named_parameters()}
    assert sizes["head.0.weight"] == 512 * 512 * 4 and sizes["head.2.weight"] == 512 * 1000 * 4
    assert [s.shape for s in vgg.features.parameters()] == [s.shape for s in nin.features.parameters()]
    assert nin(example_input("vgg16_nin", 2)[0]).shape == (2, 1000)


class _Kinds(nn.Module):
    """One layer of each kernel kind, and a FC layer, on a 2x2x8x8 input."""

    def __init__(self) -> None:
        super().__init__()
        self.wino = nn.Conv2d(2, 4, 3, padding=1)  # dense 3x3 stride 1: Winograd
        self.strided = nn.Conv2d(4, 4, 3, stride=2, padding=1)  # stride 2: GEMM
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)  # grouped: GEMM (its bytes bind)
        self.pointwise = nn.Conv2d(4, 4, 1)  # 1x1: GEMM
        self.fc = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pointwise(self.depthwise(self.strided(self.wino(x))))
        return self.fc(torch.relu(x).flatten(1))


def test_kernels_record_kind_flops_and_bytes():
    model = _Kinds()
    inv = inventory(model, (torch.randn(2, 2, 8, 8),))
    *compute, memory = inv.kernels
    assert [k.kind for k in compute] == ["winograd", "gemm", "gemm", "gemm", "gemm"]
    assert memory.kind == "memory" and memory.flops == 0
    assert sum(k.flops for k in inv.kernels) == inv.forward_flops
    f4 = 4  # bytes per float32
    wino = compute[0]
    assert wino.flops == 2 * (2 * 4 * 8 * 8) * (2 * 3 * 3)
    # input and output activations grow with the batch; weight and bias are fixed
    assert wino.batch_bytes == f4 * (2 * 2 * 8 * 8 + 2 * 4 * 8 * 8)
    assert wino.fixed_bytes == f4 * (4 * 2 * 3 * 3 + 4)
    fc = compute[-1]  # addmm(bias, x, weight.t()): the transposed weight is a view of the parameter
    assert fc.flops == 2 * 2 * 64 * 3
    assert fc.batch_bytes == f4 * (2 * 64 + 2 * 3) and fc.fixed_bytes == f4 * (3 * 64 + 3)
    # relu reads and writes its 2x4x4x4 input; flatten is a view and moves nothing
    assert memory.batch_bytes == f4 * 2 * (2 * 4 * 4 * 4) and memory.fixed_bytes == 0


def test_resnet50_kernels(resnet50_224):
    """torchvision's ResNet-50 (v1.5): 13 Winograd convolutions (the stride-1 3x3s: stages 2-4 put
    their first block's stride on the 3x3), 40 other convolutions and the FC layer; BatchNorm, ReLU,
    the residual adds and pooling move about 240 MB per image in the forward."""
    _, inv, _ = resnet50_224
    kinds = [k.kind for k in inv.kernels]
    assert (kinds.count("winograd"), kinds.count("gemm"), kinds.count("memory")) == (13, 41, 1)
    assert sum(k.flops for k in inv.kernels) == inv.forward_flops
    assert sum(k.flops for k in inv.kernels if k.kind == "winograd") / inv.forward_flops == pytest.approx(0.368, abs=0.005)
    assert inv.kernels[-1].batch_bytes / 1e6 == pytest.approx(238, abs=3)
    assert sum(k.fixed_bytes for k in inv.kernels) >= 4 * 25_557_032  # every weight read once


def test_attention_is_one_kernel_on_cpu_and_meta():
    """scaled_dot_product_attention is one GEMM kernel (as torch's fused GPU kernels run it: the
    attention matrix never goes to memory), whether the device runs it fused (CPU) or as the
    unfused math (meta); torch's function is put back afterwards."""
    import torch.nn.functional as F

    class SelfAttention(nn.Module):  # as torch's TransformerEncoderLayer and torchvision's ViT call it
        def __init__(self) -> None:
            super().__init__()
            self.mha = nn.MultiheadAttention(d, h, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mha(x, x, x, need_weights=False)[0]

    original = F.scaled_dot_product_attention
    b, s, d, h = 2, 6, 8, 2
    kernels = {}
    for dev in ("cpu", "meta"):
        with torch.device(dev):
            torch.manual_seed(0)
            model = SelfAttention()
            x = torch.randn(b, s, d)
        inv = inventory(model, (x,))
        kernels[dev] = inv.kernels
        assert F.scaled_dot_product_attention is original
    assert kernels["cpu"] == kernels["meta"]
    # in-projection, attention, out-projection, then the memory ops
    proj_in, attention, proj_out, memory = kernels["cpu"]
    assert [k.kind for k in (proj_in, attention, proj_out)] == ["gemm"] * 3
    assert attention.flops == 2 * (2 * b * h * s * s * (d // h))  # Q K^T and weights x V
    assert attention.batch_bytes == 4 * 4 * b * s * d and attention.fixed_bytes == 0  # Q, K, V and the output
    assert proj_in.flops == 2 * b * s * d * 3 * d and proj_out.flops == 2 * b * s * d * d
