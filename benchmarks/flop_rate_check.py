"""Does the layer model predict a network's training FLOP rate on models nobody measured? (issue 31)

The estimated profile's FLOP rate is c x r x peak (commsched.profile.estimate): c calibrated on
ResNet-50, r a model's rate relative to that. Three ways to get r, compared on published training
throughputs, each as the FLOP-rate ratio of a model to ResNet-50 in the same run on the same GPU
(images/s x forward FLOPs per image, of the model over ResNet-50's):

(a) constant c: r = 1 for every model (the estimate before issue 31);
(b) the per-model table of the first issue-31 fix: VGG-16 2.311, VGG-19 2.537, ResNet-152 1.130 on
    Volta GPUs (from Lambda's V100 run below and jcjohnson's VGG-19/VGG-16), 1 elsewhere;
(c) the layer model (commsched.profile.estimate.layer_compute_s): per forward kernel the longer of
    compute (3x3 stride-1 convolutions at 1/2.25 of their FLOPs) and memory time, summed, x3.

The layer model has one fitted parameter, the fraction e_m of datasheet memory bandwidth that
FLOP-free kernels reach; the compute fraction e_c follows from the anchor (ResNet-50 v1.5, batch 112,
V100-SXM2, 367 images/s, as c). e_m is fitted (least squares on log ratios) on one source, Lambda's
TensorFlow benchmark (4 pre-Ampere GPUs x VGG-16, ResNet-152, Inception-v3, AlexNet), and checked on
the held-out rest: jcjohnson/cnn-benchmarks (Torch7, cuDNN 5.1, 4 GPUs x 7 models) and NVIDIA
DeepLearningExamples (PyTorch, V100: ResNeXt-101, SE-ResNeXt-101, EfficientNet-B0/B4; BERT-large).

Each model is built as the benchmark ran it (tf_cnn_benchmarks' ResNets are v1, its AlexNet has 384
filters in conv4 and a 227 input; BVLC AlexNet has grouped convolutions and LRN) and inventoried on
the meta device. Prints the fitted parameter, the per-point table, a summary, sensitivity to the
model's choices, and r for the zoo models on the resource-sharing testbed's V100S.

Usage: .venv/bin/python benchmarks/flop_rate_check.py
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import Bottleneck, ResNet

from commsched.profile.devices import (
    LAYER_COMPUTE_EFFICIENCY,
    LAYER_MEMORY_EFFICIENCY,
    REFERENCE_BATCH_SIZE,
    REFERENCE_IMAGES_PER_S,
    WINOGRAD_MULTIPLY_REDUCTION,
    Device,
    device,
)
from commsched.models.inventory import inventory
from commsched.models.inventory_types import ModelInventory
from commsched.models.zoo import BertBase
from commsched.profile.estimate import flop_rate_ratio, layer_compute_s

GIB = 2**30

# --- GPUs ------------------------------------------------------------------------------------------
# Lambda's logs print TensorFlow's device properties (SM count, boost clock, bandwidth) for the GPU of
# each run; peak = SMs x FP32 lanes per SM (64 Volta/Turing, 128 Pascal) x 2 x clock. jcjohnson's
# README lists the GPUs' FP32 TFLOP/s; their bandwidths are NVIDIA's product pages.
GPUS = {
    "V100-SXM3-32GB": Device("V100-SXM3-32GB", 80 * 64 * 2 * 1.597e9, "Lambda log: 80 SMs, 1.597 GHz, 913.62 GiB/s", 913.62 * GIB),
    "RTX 2080 Ti": Device("RTX 2080 Ti", 68 * 64 * 2 * 1.545e9, "Lambda log: 68 SMs, 1.545 GHz, 573.69 GiB/s", 573.69 * GIB),
    "Quadro RTX 8000": Device("Quadro RTX 8000", 72 * 64 * 2 * 1.77e9, "Lambda log: 72 SMs, 1.77 GHz, 625.94 GiB/s", 625.94 * GIB),
    "GTX 1080 Ti (TF)": Device("GTX 1080 Ti", 28 * 128 * 2 * 1.582e9, "Lambda log: 28 SMs, 1.582 GHz, 451.17 GiB/s", 451.17 * GIB),
    "GTX 1080 Ti": Device("GTX 1080 Ti", 10.6e12, "jcjohnson README 10.6 TFLOP/s; 484 GB/s", 484e9),
    "Pascal Titan X": Device("Pascal Titan X", 10.16e12, "jcjohnson README 10.16 TFLOP/s; 480 GB/s", 480e9),
    "GTX 1080": Device("GTX 1080", 8.87e12, "jcjohnson README 8.87 TFLOP/s; 320 GB/s", 320e9),
    "Maxwell Titan X": Device("Maxwell Titan X", 6.14e12, "jcjohnson README 6.14 TFLOP/s; 336.5 GB/s", 336.5e9),
    "V100-SXM2": device("V100-SXM2"),
}
VOLTA = {"V100-SXM3-32GB", "V100-SXM2"}


# --- models as the benchmarks ran them ---------------------------------------------------------------
def _v1(model: ResNet) -> ResNet:
    """ResNet v1 (tf_cnn_benchmarks): stride 2 in the first 1x1 of a downsampling block, not the 3x3."""
    for layer in (model.layer2, model.layer3, model.layer4):
        layer[0].conv1.stride, layer[0].conv2.stride = (2, 2), (1, 1)
    return model


class _SEBottleneck(Bottleneck):
    """DeepLearningExamples' SE-ResNeXt block: squeeze-excitation (reduction 16) before the residual add."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        c = self.conv3.out_channels
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c // 16, 1), nn.ReLU(inplace=True), nn.Conv2d(c // 16, c, 1), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = out * self.se(out)
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def _alexnet_tf() -> nn.Module:
    """tf_cnn_benchmarks' AlexNet (models/alexnet_model.py): 64-192-384-384-256 filters, 227 input, 1001 classes."""
    relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, 4), relu(), nn.MaxPool2d(3, 2), nn.Conv2d(64, 192, 5, padding=2), relu(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), relu(), nn.Conv2d(384, 384, 3, padding=1), relu(),
        nn.Conv2d(384, 256, 3, padding=1), relu(), nn.MaxPool2d(3, 2), nn.Flatten(),
        nn.Dropout(), nn.Linear(9216, 4096), relu(), nn.Dropout(), nn.Linear(4096, 4096), relu(), nn.Linear(4096, 1001),
    )


def _alexnet_bvlc() -> nn.Module:
    """Caffe's BVLC AlexNet (jcjohnson): 96-256-384-384-256 filters, conv2/4/5 in 2 groups, LRN, Caffe's
    ceil-mode pooling (so a 224 input still gives 6x6 before fc6)."""
    relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    lrn = lambda: nn.LocalResponseNorm(5, 1e-4, 0.75)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, 4), relu(), lrn(), pool(), nn.Conv2d(96, 256, 5, padding=2, groups=2), relu(), lrn(), pool(),
        nn.Conv2d(256, 384, 3, padding=1), relu(), nn.Conv2d(384, 384, 3, padding=1, groups=2), relu(),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), relu(), pool(), nn.Flatten(),
        nn.Linear(9216, 4096), relu(), nn.Dropout(), nn.Linear(4096, 4096), relu(), nn.Dropout(), nn.Linear(4096, 1000),
    )


tv = torchvision.models
# name: (builder, image size or None for BERT's 128 token ids)
MODELS = {
    "resnet18": (tv.resnet18, 224), "resnet34": (tv.resnet34, 224), "resnet50": (tv.resnet50, 224),
    "resnet101": (tv.resnet101, 224), "resnet152": (tv.resnet152, 224),
    "resnet50_v1": (lambda: _v1(tv.resnet50()), 224), "resnet152_v1": (lambda: _v1(tv.resnet152()), 224),
    "vgg16": (tv.vgg16, 224), "vgg19": (tv.vgg19, 224),
    "inception_v3": (lambda: tv.inception_v3(aux_logits=False, init_weights=False), 299),  # tf_cnn_benchmarks: no aux head
    "alexnet_tf": (_alexnet_tf, 227), "alexnet_bvlc": (_alexnet_bvlc, 224),
    "resnext101_32x4d": (lambda: ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4), 224),
    "se_resnext101_32x4d": (lambda: ResNet(_SEBottleneck, [3, 4, 23, 3], groups=32, width_per_group=4), 224),
    "efficientnet_b0": (tv.efficientnet_b0, 224), "efficientnet_b4": (tv.efficientnet_b4, 380),
    # encoder only: the pretraining heads (MLM on 20 masked tokens, NSP) are about 1% of its FLOPs
    "bert_large": (lambda: BertBase(num_layers=24, hidden=1024, heads=16, feed_forward=4096), None),
}


def build_inventory(name: str) -> ModelInventory:
    builder, size = MODELS[name]
    with torch.device("meta"):
        model = builder()
        x = torch.zeros(2, 128, dtype=torch.long) if size is None else torch.empty(2, 3, size, size)
    return inventory(model, (x,), name=name)


# --- published throughputs ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    source: str
    gpu: str
    model: str
    images_per_s: float
    batch: int
    ref: str  # the run's ResNet-50
    ref_images_per_s: float
    ref_batch: int
    note: str = ""


def _runs(source: str, gpu: str, ref: str, runs: dict[str, tuple[float, int]], note: dict[str, str] | None = None) -> list[Point]:
    ref_ips, ref_b = runs[ref]
    return [Point(source, gpu, m, ips, b, ref, ref_ips, ref_b, (note or {}).get(m, "")) for m, (ips, b) in runs.items() if m != ref]


# Lambda's TensorFlow benchmark (github.com/lambdal/lambda-tensorflow-benchmark, logs/<run>/
# syn-replicated-fp32-1gpus/<model>-<batch>/throughput/1, "total images/sec"), tf_cnn_benchmarks,
# FP32, synthetic data, no XLA: V100 run Platinum-Tesla_V100-SXM3-32GB_HP16_TF2_2, 2080 Ti
# Gold_6230-GeForce_RTX_2080_Ti_trt_TF2_2, RTX 8000 Gold_6230-Quadro_RTX_8000_trt2_TF2_2, 1080 Ti
# i7-6850K-GeForce_GTX_1080_Ti (all TF 2.2). Ampere runs are left out: TF 2.4+ runs "FP32" on TF32 tensor cores.
LAMBDA = {
    "V100-SXM3-32GB": {"resnet50_v1": (432.16, 192), "resnet152_v1": (167.46, 96), "vgg16": (249.19, 192), "inception_v3": (273.17, 192), "alexnet_tf": (5132.32, 1536)},
    "RTX 2080 Ti": {"resnet50_v1": (293.10, 64), "resnet152_v1": (113.27, 32), "vgg16": (164.60, 56), "inception_v3": (199.37, 64), "alexnet_tf": (3692.67, 512)},
    "Quadro RTX 8000": {"resnet50_v1": (328.26, 256), "resnet152_v1": (137.93, 128), "vgg16": (186.83, 256), "inception_v3": (222.40, 256), "alexnet_tf": (4089.84, 2048)},
    "GTX 1080 Ti (TF)": {"resnet50_v1": (208.72, 64), "resnet152_v1": (83.26, 32), "vgg16": (124.79, 56), "inception_v3": (131.34, 64), "alexnet_tf": (2636.41, 512)},
}
# jcjohnson/cnn-benchmarks README: forward + backward ms for 16 images at 224x224, Torch7, cuDNN 5.1
# (5.1.10 on the 1080 Ti, 5.1.05 on the others). ResNets are fb.resnet.torch's (torchvision's layout).
JCJOHNSON_MS = {
    "GTX 1080 Ti": {"resnet50": 101.21, "resnet18": 32.78, "resnet34": 51.31, "resnet101": 154.26, "resnet152": 215.54, "vgg16": 128.14, "vgg19": 148.19, "alexnet_bvlc": 13.89},
    "Pascal Titan X": {"resnet50": 103.58, "resnet18": 31.54, "resnet34": 51.59, "resnet101": 156.44, "resnet152": 217.91, "vgg16": 128.62, "vgg19": 147.32, "alexnet_bvlc": 14.56},
    "GTX 1080": {"resnet50": 149.82, "resnet18": 43.94, "resnet34": 72.09, "resnet101": 225.80, "resnet152": 314.30, "vgg16": 182.79, "vgg19": 210.39, "alexnet_bvlc": 20.74},
    "Maxwell Titan X": {"resnet50": 159.62, "resnet18": 51.42, "resnet34": 80.23, "resnet101": 247.49, "resnet152": 345.45, "vgg16": 192.78, "vgg19": 225.14, "alexnet_bvlc": 21.85},
}
# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets, 1x V100 16 GB (DGX-1), FP32, pytorch-21.03
# container: the models' READMEs (resnet50 367, resnext101-32x4d 147, se-resnext101-32x4d 132,
# efficientnet b0 655, b4 83 images/s); batches from configs.yml (DGX1V FP32: 112, 64, 64, 64, 16).
DLE_V100 = {"resnet50": (367.0, 112), "resnext101_32x4d": (147.0, 64), "se_resnext101_32x4d": (132.0, 64), "efficientnet_b0": (655.0, 64), "efficientnet_b4": (83.0, 16)}
# PyTorch/LanguageModeling/BERT README, pretraining phase 1 (sequence 128) on 1x V100 32 GB, FP32,
# pytorch 21.11: 50 sequences/s, 4096 per step in 128 accumulation steps (32 at a time); against
# ResNet-50 on 1x V100 32 GB, FP32, pytorch 21.03: 356 images/s (resnet50v1.5 README). Two containers.
BERT = Point("DLE", "V100-SXM2", "bert_large", 50.0, 32, "resnet50", 356.0, 112, "cross-container")

POINTS = (
    [p for g, runs in LAMBDA.items() for p in _runs("Lambda", g, "resnet50_v1", runs)]
    + [p for g, ms in JCJOHNSON_MS.items() for p in _runs("jcjohnson", g, "resnet50", {m: (16e3 / t, 16) for m, t in ms.items()},
                                                           {"alexnet_bvlc": "LRN: 1 cuDNN kernel there, 12 torch ops here"})]
    + _runs("DLE", "V100-SXM2", "resnet50", DLE_V100)
    + [BERT]
)
FIT = [p for p in POINTS if p.source == "Lambda"]
HELD_OUT = [p for p in POINTS if p.source != "Lambda"]

# (b): the per-model table of the first fix (Volta only), FLOP-rate ratios to ResNet-50
TABLE = {"vgg16": 2.311, "vgg19": 2.537, "resnet152": 1.130, "resnet152_v1": 1.130}


# --- the comparison -------------------------------------------------------------------------------
def compute_efficiency_for(ref: ModelInventory, memory_efficiency: float, winograd: float = WINOGRAD_MULTIPLY_REDUCTION, roofline: str = "max") -> float:
    """e_c such that the anchor (ResNet-50 v1.5 at batch 112 on a V100-SXM2) runs at 367 images/s."""
    target = REFERENCE_BATCH_SIZE / REFERENCE_IMAGES_PER_S
    lo, hi = 1e-3, 10.0
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        t = _time(ref, GPUS["V100-SXM2"], REFERENCE_BATCH_SIZE, mid, memory_efficiency, winograd, roofline)
        lo, hi = (mid, hi) if t > target else (lo, mid)
    return math.sqrt(lo * hi)


def _time(inv: ModelInventory, dev: Device, batch: int, e_c: float, e_m: float, winograd: float, roofline: str) -> float:
    if roofline == "max":
        return layer_compute_s(inv, dev, batch, compute_efficiency=e_c, memory_efficiency=e_m, winograd=winograd)
    # ablation: a kernel's compute and memory times added instead of overlapped
    scale = batch / inv.batch_size
    return 3 * sum(k.flops * scale / (winograd if k.kind == "winograd" else 1) / (e_c * dev.peak_flops)
                   + (k.batch_bytes * scale + k.fixed_bytes) / (e_m * dev.memory_bandwidth_bytes_per_s) for k in inv.kernels)


def measured(p: Point, invs: dict[str, ModelInventory]) -> float:
    per_image = {m: invs[m].forward_flops / invs[m].batch_size for m in (p.model, p.ref)}
    return p.images_per_s * per_image[p.model] / (p.ref_images_per_s * per_image[p.ref])


def predicted(p: Point, invs, e_c, e_m, winograd=WINOGRAD_MULTIPLY_REDUCTION, roofline="max") -> float:
    dev = GPUS[p.gpu]

    def rate(m: str, b: int) -> float:
        inv = invs[m]
        return inv.forward_flops * b / inv.batch_size / _time(inv, dev, b, e_c, e_m, winograd, roofline)

    return rate(p.model, p.batch) / rate(p.ref, p.ref_batch)


def table(p: Point) -> float:
    return TABLE.get(p.model, 1.0) if p.gpu in VOLTA else 1.0


def log_errors(points, invs, e_c, e_m, **kw) -> list[float]:
    return [math.log(predicted(p, invs, e_c, e_m, **kw) / measured(p, invs)) for p in points]


def fit(invs, winograd=WINOGRAD_MULTIPLY_REDUCTION, roofline="max", points=None) -> tuple[float, float]:
    """e_m minimising the sum of squared log errors on ``points`` (default FIT), e_c from the anchor."""
    best = None
    for i in range(10, 1501):
        e_m = i / 1000
        e_c = compute_efficiency_for(invs["resnet50"], e_m, winograd, roofline)
        if e_c > 1.0:
            continue  # the anchor cannot be met with memory this slow
        sse = sum(e * e for e in log_errors(points or FIT, invs, e_c, e_m, winograd=winograd, roofline=roofline))
        if best is None or sse < best[0]:
            best = (sse, e_m, e_c)
    return best[1], best[2]


def summary(errs: list[float]) -> str:
    """median and max of the factor by which prediction and measurement differ, as a percentage."""
    a = sorted(abs(e) for e in errs)
    return f"median {math.expm1(statistics.median(a)):.0%}, max {math.expm1(a[-1]):.0%} (n = {len(a)})"


def main() -> None:
    invs = {m: build_inventory(m) for m in MODELS}
    e_m, e_c = fit(invs)
    print("## Layer model: fitted on Lambda's TensorFlow runs, checked on the held-out rest\n")
    print(f"fitted e_m (memory) = {e_m:.3f}; e_c (compute, from the anchor) = {e_c:.4f}; "
          f"devices.py has {LAYER_MEMORY_EFFICIENCY:.3f} and {LAYER_COMPUTE_EFFICIENCY:.4f}; Winograd reduction {WINOGRAD_MULTIPLY_REDUCTION}\n")
    print("| set | source | GPU | model | batch | images/s measured | images/s by (c) | FLOP-rate ratio to ResNet-50 measured | (a) constant c | (b) table | (c) layer model | (c) error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for which, pts in (("fit", FIT), ("held out", HELD_OUT)):
        for p in pts:
            m, c = measured(p, invs), predicted(p, invs, e_c, e_m)
            ips = p.images_per_s * c / m
            note = f" ({p.note})" if p.note else ""
            print(f"| {which} | {p.source} | {p.gpu} | {p.model}{note} | {p.batch} | {p.images_per_s:.0f} | {ips:.0f} | {m:.2f} | 1.00 | {table(p):.2f} | {c:.2f} | {c / m - 1:+.0%} |")
    print("\nFactor between predicted and measured FLOP-rate ratio (|log| error):\n")
    for which, pts in (("fit (Lambda)", FIT), ("held out", HELD_OUT), ("held out without BVLC AlexNet", [p for p in HELD_OUT if p.model != "alexnet_bvlc"])):
        meas = [math.log(measured(p, invs)) for p in pts]
        print(f"- {which}: (a) constant c {summary([-x for x in meas])}; (b) table {summary([math.log(table(p)) - x for p, x in zip(pts, meas)])}; "
              f"(c) layer model {summary(log_errors(pts, invs, e_c, e_m))}")

    print("\n## Sensitivity (each refitted on the same Lambda points; held-out error)\n")
    print("| variant | e_m | e_c | fit | held out |")
    print("|---|---|---|---|---|")
    for name, kw in (("as shipped: roofline max, Winograd F(2x2,3x3) 2.25", {}), ("Winograd F(4x4,3x3) 4.0", {"winograd": 4.0}),
                     ("no Winograd (1.0)", {"winograd": 1.0}), ("compute + memory added, not max", {"roofline": "sum"})):
        vm, vc = fit(invs, **kw)
        print(f"| {name} | {vm:.3f} | {vc:.3f} | {summary(log_errors(FIT, invs, vc, vm, **kw))} | {summary(log_errors(HELD_OUT, invs, vc, vm, **kw))} |")
    for name, sel in (("fit on jcjohnson instead, check on Lambda + DLE", lambda p: p.source == "jcjohnson"),
                      ("fit on DLE instead, check on Lambda + jcjohnson", lambda p: p.source == "DLE")):
        pts_fit = [p for p in POINTS if sel(p)]
        pts_held = [p for p in POINTS if not sel(p)]
        vm, vc = fit(invs, points=pts_fit)
        meas = [math.log(measured(p, invs)) for p in pts_held]
        print(f"| {name} | {vm:.3f} | {vc:.3f} | {summary(log_errors(pts_fit, invs, vc, vm))} | "
              f"{summary(log_errors(pts_held, invs, vc, vm))} (constant c {summary([-x for x in meas])}) |")

    print("\n## r for the zoo models on the resource-sharing testbed (V100S), shipped constants\n")
    from commsched.profile.zoo_profile import zoo_inventory

    zoo = ("alexnet", "vgg16", "vgg19", "resnet18", "resnet50", "resnet101", "vit_b_16", "bert_base", "efficientnet_b0", "mobilenet_v2", "densenet121")
    batches = (16, 32, 64, 128)
    print("| model | " + " | ".join(f"batch {b}" for b in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for m in zoo:
        inv = zoo_inventory(m)
        print(f"| {m} | " + " | ".join(f"{flop_rate_ratio(inv, 'V100S', b):.2f}" for b in batches) + " |")
    anchor = flop_rate_ratio(zoo_inventory("resnet50"), "V100-SXM2", REFERENCE_BATCH_SIZE)
    print(f"\nanchor: resnet50 at batch {REFERENCE_BATCH_SIZE} on V100-SXM2, r = {anchor:.4f}")


if __name__ == "__main__":
    main()
