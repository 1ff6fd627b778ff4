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
"""

from __future__ import annotations

from dataclasses import dataclass

from commsched.errors import CommschedError


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: float
    source: str


REFERENCE_FORWARD_FLOPS_PER_IMAGE = 8.178368512e9  # resnet50, 224x224, torch.utils.flop_counter
REFERENCE_IMAGES_PER_S = 367.0
REFERENCE_PEAK_FLOPS = 15.7e12
CALIBRATED_EFFICIENCY = 3 * REFERENCE_FORWARD_FLOPS_PER_IMAGE * REFERENCE_IMAGES_PER_S / REFERENCE_PEAK_FLOPS

DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("K80", 4.37e12, "NVIDIA Tesla K80 datasheet: 8.73 TFLOP/s FP32 per board (boost), 2 GK210 per board"),
        Device("P100", 9.3e12, "NVIDIA Tesla P100 PCIe datasheet: 9.3 TFLOP/s FP32"),
        Device("V100", 14.0e12, "NVIDIA Tesla V100 PCIe datasheet: 14 TFLOP/s FP32"),
        Device("V100-SXM2", 15.7e12, "NVIDIA Tesla V100 SXM2 datasheet: 15.7 TFLOP/s FP32"),
        Device("V100S", 16.4e12, "NVIDIA V100S PCIe datasheet: 16.4 TFLOP/s FP32"),
        Device("RTX2080Ti", 13.45e12, "NVIDIA Turing whitepaper: RTX 2080 Ti 13.45 TFLOP/s FP32 (reference boost)"),
        Device("A100", 19.5e12, "NVIDIA A100 datasheet: 19.5 TFLOP/s FP32"),
        Device("H100", 67.0e12, "NVIDIA H100 SXM5 datasheet: 67 TFLOP/s FP32"),
    )
}


def device(name: str) -> Device:
    key = {k.lower().replace("-", "").replace(" ", ""): k for k in DEVICES}.get(name.lower().replace("-", "").replace(" ", ""))
    if key is None:
        raise CommschedError(f"unknown device {name!r}; choose from {', '.join(DEVICES)}")
    return DEVICES[key]
