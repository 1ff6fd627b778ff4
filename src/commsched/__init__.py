"""commsched: plan, simulate and apply the gradient-communication schedule of data-parallel training.

``import commsched`` is light (no torch): ``DataParallel``, ``ddp_options`` and ``plan_for`` load torch on first use.
"""

__version__ = "0.1.0"

__all__ = ["DataParallel", "ddp_options", "load_plan", "plan_for"]


def __getattr__(name: str):
    if name == "DataParallel":
        from commsched.runtime.ddp import DataParallel

        return DataParallel
    if name == "ddp_options":
        from commsched.runtime.ddp import ddp_options

        return ddp_options
    if name == "plan_for":
        from commsched.runtime.api import plan_for

        return plan_for
    if name == "load_plan":
        from commsched.io import load_plan

        return load_plan
    raise AttributeError(f"module 'commsched' has no attribute {name!r}")
