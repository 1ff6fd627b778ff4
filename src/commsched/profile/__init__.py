"""Model profiles: estimated from an inventory's FLOPs (pure) or built for a zoo model (torch).

Importing this package does not import torch. The torch-backed helpers are imported from their
module, ``from commsched.profile.zoo_profile import zoo_profile, zoo_inventory``: the submodule
shares the function's name, and Python binds the package attribute ``zoo_profile`` to the submodule
once it is loaded, so a package-level re-export would be shadowed.
"""

from __future__ import annotations

from commsched.profile.estimate import estimate_profile

__all__ = ["estimate_profile"]
