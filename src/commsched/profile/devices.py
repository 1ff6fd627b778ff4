"""GPU presets for estimated profiles: peak FP32 throughput and the efficiency c of OSF Eq. 5.

Peak numbers are the vendor's FP32 (non-tensor-core) figures at boost clock:

- K80: 8.73 TFLOP/s per board with GPU Boost, two GK210 per board; one GK210 is one worker in
  MG-WFBP's cluster 1, so 4.37 TFLOP/s (NVIDIA Tesla K80 datasheet).
- P100: 9.3 TFLOP/s PCIe (NVIDIA Tesla P100 datasheet).
- V100: 14 TFLOP/s PCIe, the card of MG-WFBP's clusters 2 and 3; V100-SXM2: 15.7 TFLOP/s
  (NVIDIA Tesla V100 datasheet).
- V100S: 16.4 TFLOP/s PCIe (NVIDIA V100S datasheet), the resource-sharing paper's GPU.
- RTX 2080 Ti: 13.45 TFLOP/s at the 1545 MHz reference boost (NVIDIA Turing architecture
  whitepaper), the OSF testbed's GPU.
- A100: 19.5 TFLOP/s FP32 (NVIDIA A100 datasheet; TF32 tensor cores are not assumed).
- H100: 67 TFLOP/s FP32, SXM5 (NVIDIA H100 datasheet).

Efficiency c (OSF Eq. 5) is calibrated once, on ResNet-50 v1.5 (torchvision's resnet50) trained in
FP32 on one V100-SXM2 16 GB: 367 images/s (NVIDIA DeepLearningExamples,
PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training performance: NVIDIA DGX-1 16GB",
pytorch-21.03 NGC container). With OSF Eq. 4-5, one image costs 3 x F / (c x peak), so
c = 3 x F x 367 / 15.7e12 with F = 8.178e9 forward FLOPs per 224x224 image (torch.utils.flop_counter
on torchvision's resnet50; a test keeps this constant equal to the counter). The same c is used for
every device: a known simplification, since real efficiency varies by GPU and model.

Models differ, by up to 3x: cuDNN runs VGG's 3x3 convolutions (Winograd, large GEMMs, no BatchNorm)
at 2.3-3x ResNet-50's FLOP rate, while depthwise convolutions and normalisation layers are bound by
memory bandwidth. So where an inventory records its kernels, the estimate's FLOP rate comes from a
layer model (:func:`commsched.profile.estimate.flop_rate_ratio`): each forward kernel takes the
longer of its compute time at :data:`LAYER_COMPUTE_EFFICIENCY` x peak (3x3 stride-1 convolutions at
1/:data:`WINOGRAD_MULTIPLY_REDUCTION` of their FLOPs) and its memory time at
:data:`LAYER_MEMORY_EFFICIENCY` x the device's memory bandwidth, summed over kernels, x3 for the
backward (OSF Eq. 4). Calibrated so that ResNet-50 at batch 112 on a V100-SXM2 runs at the same 367
images/s; its one fitted parameter and its held-out check are in ``benchmarks/flop_rate_check.py``
(issue 31).

Memory bandwidths are the vendors' datasheet figures: K80 480 GB/s per board (aggregate of its two
GK210, so 240 GB/s for one); P100 PCIe 16 GB 732 GB/s; V100 PCIe and SXM2 900 GB/s; V100S PCIe
1134 GB/s; RTX 2080 Ti 616 GB/s (14 Gbps GDDR6 on 352 bits, Turing whitepaper); A100 40 GB 1555 GB/s;
H100 SXM5 3.35 TB/s.
"""

from __future__ import annotations

from dataclasses import dataclass

from commsched.errors import CommschedError


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: float
    source: str
    # datasheet DRAM bandwidth; 0 = unknown, and then estimates use the efficiency c alone (OSF Eq. 5)
    memory_bandwidth_bytes_per_s: float = 0.0


REFERENCE_FORWARD_FLOPS_PER_IMAGE = 8.178368512e9  # resnet50, 224x224, torch.utils.flop_counter
REFERENCE_IMAGES_PER_S = 367.0
REFERENCE_PEAK_FLOPS = 15.7e12
CALIBRATED_EFFICIENCY = 3 * REFERENCE_FORWARD_FLOPS_PER_IMAGE * REFERENCE_IMAGES_PER_S / REFERENCE_PEAK_FLOPS
# The batch of that measurement: DeepLearningExamples' ConvNets/configs.yml, resnet50, DGX1V, FP32.
REFERENCE_BATCH_SIZE = 112

# --- the layer model (commsched.profile.estimate.flop_rate_ratio) -----------------------------------
# Winograd's F(2x2, 3x3) computes a 2x2 output tile of a 3x3 filter with (2+3-1)^2 = 16 multiplies
# instead of 2^2 x 3^2 = 36 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
# CVPR 2016, Section 4): 2.25x fewer. cuDNN does not document its tile sizes; F(4x4, 3x3)'s 4x
# predicts the held-out runs worse (benchmarks/flop_rate_check.py), and the transforms it adds eat
# into its saving, so the smaller tile's count is taken as the effective one.
WINOGRAD_MULTIPLY_REDUCTION = 2.25
# Fraction of the datasheet memory bandwidth that FLOP-free kernels reach, with bytes counted as
# one read of each input and one write of each output (BatchNorm's second pass over its input is in
# this fraction): the model's one fitted parameter, least squares on log FLOP-rate ratios of
# Lambda's TensorFlow benchmark (4 GPUs x 4 models), benchmarks/flop_rate_check.py.
LAYER_MEMORY_EFFICIENCY = 0.593
# Fraction of peak FP32 that convolution and GEMM kernels reach: set by the anchor, ResNet-50 v1.5
# (torchvision's resnet50) at REFERENCE_BATCH_SIZE on a V100-SXM2 at REFERENCE_IMAGES_PER_S under
# the layer model with LAYER_MEMORY_EFFICIENCY (benchmarks/flop_rate_check.py; a test recomputes it).
LAYER_COMPUTE_EFFICIENCY = 0.90276

DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("K80", 4.37e12, "NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s FP32 per board (boost), 2 GK210 per board; 480 GB/s per board", 240e9),
        Device("P100", 9.3e12, "NVIDIA Tesla P100 PCIe datasheet: 9.3 TFLOP/s FP32, 732 GB/s (16 GB)", 732e9),
        Device("V100", 14.0e12, "NVIDIA Tesla V100 PCIe datasheet: 14 TFLOP/s FP32, 900 GB/s", 900e9),
        Device("V100-SXM2", 15.7e12, "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s FP32, 900 GB/s", 900e9),
        Device("V100S", 16.4e12, "NVIDIA V100S PCIe datasheet: 16.4 TFLOP/s FP32, 1134 GB/s", 1134e9),
        Device("RTX2080Ti", 13.45e12, "NVIDIA Turing whitepaper: RTX 2080 Ti 13.45 TFLOP/s FP32 (reference boost), 616 GB/s", 616e9),
        Device("A100", 19.5e12, "NVIDIA A100 datasheet: 19.5 TFLOP/s FP32, 1555 GB/s (40 GB)", 1555e9),
        Device("H100", 67.0e12, "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32, 3.35 TB/s", 3.35e12),
    )
}


def device(name: str) -> Device:
    key = {k.lower().replace("-", "").replace(" ", ""): k for k in DEVICES}.get(name.lower().replace("-", "").replace(" ", ""))
    if key is None:
        raise CommschedError(f"unknown device {name!r}; choose from {', '.join(DEVICES)}")
    return DEVICES[key]
