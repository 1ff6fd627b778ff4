"""Estimated profiles of the MG-WFBP paper's own models, where they differ from commsched's zoo.

The MG-WFBP authors' code (github.com/HKBU-HPML/MG-WFBP at commit
5b8ad54a0f37bd1a18e91558e3b05c119da5868c) builds its ImageNet models in ``dl_trainer.py``
``create_net``: ResNet-50/152 and DenseNet-161/201 are torchvision's (the zoo's too), but GoogleNet
is ``models/googlenet.py`` and Inception-v4 is ``models/inceptionv4.py``. The modules below are
written here from those files' layer lists (facts: layer types, channels, kernels, strides), not
copied:

- GoogleNet (``models/googlenet.py``): torchvision's GoogLeNet layout (conv1 7x7/2, conv2 1x1,
  conv3 3x3, nine Inception blocks with torchvision's channel table and its 3x3 "5x5" branch,
  ceil-mode max pools, dropout 0.2, fc 1024->1000) but ``BasicConv2d`` is a bias-free convolution
  and a ReLU: its BatchNorm is commented out, and ``aux_logits`` defaults to False. So 57 conv
  weights + fc weight and bias = 59 gradient tensors, MG-WFBP Table IV's count; torchvision's
  GoogLeNet (the zoo's, with BatchNorm and both auxiliary heads) has 187.
- Inception-v4 (``models/inceptionv4.py``, Cadene's pretrained-models layout): ``BasicConv2d`` =
  bias-free conv + BatchNorm(eps 1e-3) + ReLU; stem, 4 Inception-A, Reduction-A, 7 Inception-B,
  Reduction-B, 3 Inception-C, average pool, fc 1536->1000: 149 convs x 3 + 2 = 449 tensors, Table
  IV's count. The zoo has no Inception-v4 (only torchvision's v3).

Both run at 224x224, the code's ImageNet size (``dl_trainer.py`` ``imagenet_prepare``:
``image_size = 224``; MG-WFBP Section 6.1: "The resolution of the input images is 224x224"), with
Table IV's batch sizes (GoogleNet 64, Inception-v4 128). Profiles are estimated exactly as zoo
profiles are (commsched.profile.zoo_profile: inventory on the meta device at batch 2, then
OSF Eq. 4-6 on the device preset with the calibrated efficiency).

Run: .venv/bin/python benchmarks/paper_profiles.py   (writes benchmarks/data/mgwfbp-*.json)
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from commsched.profile.devices import CALIBRATED_EFFICIENCY
from commsched.formats.io import profile_to_json, write_json
from commsched.models.inventory import inventory
from commsched.models.inventory_types import ModelInventory
from commsched.profile.estimate import estimate_profile
from commsched.types import ModelProfile

SOURCE = "HKBU-HPML/MG-WFBP@5b8ad54a0f37bd1a18e91558e3b05c119da5868c"
DATA = Path(__file__).resolve().parent / "data"
IMAGE_SIZE = 224
INVENTORY_BATCH = 2  # as zoo_inventory: BatchNorm (Inception-v4) needs >1 sample per channel


# --- GoogleNet of MG-WFBP's models/googlenet.py ----------------------------------------------------


class _ConvReLU(nn.Module):
    """models/googlenet.py BasicConv2d: Conv2d(bias=False) then ReLU (its BatchNorm is commented out)."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, padding: int = 0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class _GInception(nn.Module):
    """One Inception block (1x1 | 1x1-3x3 | 1x1-3x3 | pool-1x1); the third branch's second conv is
    3x3 in the authors' file, as in torchvision."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool: int) -> None:
        super().__init__()
        self.branch1 = _ConvReLU(cin, c1, 1)
        self.branch2 = nn.Sequential(_ConvReLU(cin, c3r, 1), _ConvReLU(c3r, c3, 3, padding=1))
        self.branch3 = nn.Sequential(_ConvReLU(cin, c5r, 1), _ConvReLU(c5r, c5, 3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True), _ConvReLU(cin, pool, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


# (in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool proj), models/googlenet.py GoogLeNet.__init__
_GOOGLENET_BLOCKS = {
    "inception3a": (192, 64, 96, 128, 16, 32, 32),
    "inception3b": (256, 128, 128, 192, 32, 96, 64),
    "inception4a": (480, 192, 96, 208, 16, 48, 64),
    "inception4b": (512, 160, 112, 224, 24, 64, 64),
    "inception4c": (512, 128, 128, 256, 24, 64, 64),
    "inception4d": (512, 112, 144, 288, 32, 64, 64),
    "inception4e": (528, 256, 160, 320, 32, 128, 128),
    "inception5a": (832, 256, 160, 320, 32, 128, 128),
    "inception5b": (832, 384, 192, 384, 48, 128, 128),
}


class MGWFBPGoogLeNet(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = _ConvReLU(3, 64, 7, stride=2, padding=3)
        self.conv2 = _ConvReLU(64, 64, 1)
        self.conv3 = _ConvReLU(64, 192, 3, padding=1)
        for name, cfg in _GOOGLENET_BLOCKS.items():
            self.add_module(name, _GInception(*cfg))
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = lambda t, k=3: F.max_pool2d(t, k, stride=2, ceil_mode=True)  # noqa: E731
        x = pool(self.conv1(x))
        x = pool(self.conv3(self.conv2(x)))
        x = pool(self.inception3b(self.inception3a(x)))
        for b in ("inception4a", "inception4b", "inception4c", "inception4d", "inception4e"):
            x = getattr(self, b)(x)
        x = pool(x, 2)  # maxpool4: MaxPool2d(2, stride=2, ceil_mode=True)
        x = self.inception5b(self.inception5a(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(F.dropout(x, 0.2, self.training))


# --- Inception-v4 of MG-WFBP's models/inceptionv4.py ----------------------------------------------


class _CBR(nn.Module):
    """models/inceptionv4.py BasicConv2d: Conv2d(bias=False), BatchNorm2d(eps=0.001), ReLU."""

    def __init__(self, cin: int, cout: int, k, stride: int = 1, padding=0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


def _seq(*layers: tuple) -> nn.Sequential:
    return nn.Sequential(*(_CBR(*a) for a in layers))


class _Cat(nn.Module):
    """Branches applied to the same input, concatenated on channels (every v4 block but Inception-C)."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], 1)


class _AvgThen(nn.Module):
    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False))


class _MaxPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 3, stride=2)


def _inception_a() -> nn.Module:
    return _Cat(
        _seq((384, 96, 1)),
        _seq((384, 64, 1), (64, 96, 3, 1, 1)),
        _seq((384, 64, 1), (64, 96, 3, 1, 1), (96, 96, 3, 1, 1)),
        _AvgThen(_CBR(384, 96, 1)),
    )


def _inception_b() -> nn.Module:
    return _Cat(
        _seq((1024, 384, 1)),
        _seq((1024, 192, 1), (192, 224, (1, 7), 1, (0, 3)), (224, 256, (7, 1), 1, (3, 0))),
        _seq(
            (1024, 192, 1),
            (192, 192, (7, 1), 1, (3, 0)),
            (192, 224, (1, 7), 1, (0, 3)),
            (224, 224, (7, 1), 1, (3, 0)),
            (224, 256, (1, 7), 1, (0, 3)),
        ),
        _AvgThen(_CBR(1024, 128, 1)),
    )


class _InceptionC(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b0 = _CBR(1536, 256, 1)
        self.b1_0 = _CBR(1536, 384, 1)
        self.b1_1a = _CBR(384, 256, (1, 3), 1, (0, 1))
        self.b1_1b = _CBR(384, 256, (3, 1), 1, (1, 0))
        self.b2_0 = _CBR(1536, 384, 1)
        self.b2_1 = _CBR(384, 448, (3, 1), 1, (1, 0))
        self.b2_2 = _CBR(448, 512, (1, 3), 1, (0, 1))
        self.b2_3a = _CBR(512, 256, (1, 3), 1, (0, 1))
        self.b2_3b = _CBR(512, 256, (3, 1), 1, (1, 0))
        self.b3 = _AvgThen(_CBR(1536, 256, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.b1_0(x)
        x2 = self.b2_2(self.b2_1(self.b2_0(x)))
        return torch.cat([self.b0(x), self.b1_1a(x1), self.b1_1b(x1), self.b2_3a(x2), self.b2_3b(x2), self.b3(x)], 1)


class MGWFBPInceptionV4(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _seq((3, 32, 3, 2), (32, 32, 3, 1), (32, 64, 3, 1, 1)),
            _Cat(_MaxPool(), _CBR(64, 96, 3, 2)),  # Mixed_3a
            _Cat(_seq((160, 64, 1), (64, 96, 3)), _seq((160, 64, 1), (64, 64, (1, 7), 1, (0, 3)), (64, 64, (7, 1), 1, (3, 0)), (64, 96, 3))),  # Mixed_4a
            _Cat(_CBR(192, 192, 3, 2), _MaxPool()),  # Mixed_5a
            *(_inception_a() for _ in range(4)),
            _Cat(_CBR(384, 384, 3, 2), _seq((384, 192, 1), (192, 224, 3, 1, 1), (224, 256, 3, 2)), _MaxPool()),  # Reduction_A
            *(_inception_b() for _ in range(7)),
            _Cat(_seq((1024, 192, 1), (192, 192, 3, 2)), _seq((1024, 256, 1), (256, 256, (1, 7), 1, (0, 3)), (256, 320, (7, 1), 1, (3, 0)), (320, 320, 3, 2)), _MaxPool()),  # Reduction_B
            *(_InceptionC() for _ in range(3)),
        )
        self.last_linear = nn.Linear(1536, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.last_linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


PAPER_MODELS = {"googlenet": MGWFBPGoogLeNet, "inception_v4": MGWFBPInceptionV4}
SOURCE_FILES = {"googlenet": "models/googlenet.py", "inception_v4": "models/inceptionv4.py"}


def paper_inventory(name: str) -> ModelInventory:
    """Inventory of the paper's ``name`` at 224x224, on the meta device (as zoo_inventory does)."""
    with torch.device("meta"):
        model = PAPER_MODELS[name]()
        x = torch.empty(INVENTORY_BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)
        y = torch.zeros(INVENTORY_BATCH, dtype=torch.long)
    label = f"mgwfbp-{name} ({SOURCE} {SOURCE_FILES[name]}, 224x224)"
    return inventory(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y), name=label)


def paper_profile(name: str, batch_size: int, device_name: str, dtype: str | None = None) -> ModelProfile:
    return estimate_profile(paper_inventory(name), device_name, batch_size, efficiency=CALIBRATED_EFFICIENCY, dtype=dtype)


# The profiles the figure scripts read: Table IV batch sizes; Fig. 10/11 simulate a K80, Fig. 9 runs
# on V100s (FP32 and mixed precision, i.e. FP16 gradients).
PROFILES = {
    "mgwfbp-googlenet-k80-b64.json": ("googlenet", 64, "K80", None),
    "mgwfbp-inception_v4-v100-b128.json": ("inception_v4", 128, "V100", None),
    "mgwfbp-inception_v4-v100-b128-fp16.json": ("inception_v4", 128, "V100", "fp16"),
}


def main() -> None:
    for fname, (name, batch, dev, dtype) in PROFILES.items():
        prof = paper_profile(name, batch, dev, dtype)
        path = write_json(DATA / fname, profile_to_json(prof))
        params = sum(t.bytes for t in prof.tensors) // (2 if dtype else 4)
        print(
            f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}: {len(prof.tensors)} tensors, "
            f"{params:,} parameters, forward {prof.forward_s * 1e3:.2f} ms, backward {prof.backward_s * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
