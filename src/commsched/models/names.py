"""The zoo's model names, importable without torch (the CLI lists them without building anything)."""

from __future__ import annotations

def is_import_path(spec: str) -> bool:
    """``package.module:factory`` (the user's own model) rather than a zoo name."""
    return ":" in spec


ZOO_MODELS: tuple[str, ...] = (
    "resnet18",
    "resnet50",
    "resnet101",
    "resnet152",
    "vgg16",
    "vgg19",
    "vgg16_nin",  # VGG-16 with OSF's layer replacement (Table 3)
    "alexnet",
    "googlenet",
    "densenet121",
    "densenet161",
    "densenet201",
    "inception_v3",
    "mobilenet_v2",
    "convnext_tiny",
    "efficientnet_b0",
    "swin_t",
    "vit_b_16",
    "bert_base",
    "bert_small",
)
