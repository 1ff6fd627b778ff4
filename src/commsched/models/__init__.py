"""Model zoo and gradient-tensor inventory.

Importing this package does not import torch: the torch-free records (:class:`GradTensor`,
:class:`ModelInventory`) load eagerly, the torch-backed functions on first use (PEP 562), so pure
stages can read inventories without torch.

The inventory function is imported from its module, ``from commsched.models.inventory import
inventory``: the submodule ``commsched.models.inventory`` shares its name, and Python binds the
package attribute to the submodule once it is loaded, so a package-level re-export would be shadowed.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from commsched.models.inventory_types import GradTensor, ModelInventory
from commsched.models.names import ZOO_MODELS

# Public name -> submodule that defines it; read-only, resolved lazily by __getattr__.
_LAZY = {
    "build_model": "commsched.models.zoo",
    "example_input": "commsched.models.zoo",
    "training_loss": "commsched.models.zoo",
    "default_image_size": "commsched.models.zoo",
    "sum_of_means": "commsched.models.inventory",
}

__all__ = ["GradTensor", "ModelInventory", "ZOO_MODELS", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
