"""commsched: plan, simulate and apply the gradient-communication schedule of data-parallel training.

``import commsched`` is light (no torch): ``DataParallel`` and ``plan_for`` load torch on first use.
"""

__version__ = "0.1.0"

__all__ = ["DataParallel", "load_plan", "plan_for"]


def __getattr__(name: str):
    if name == "DataParallel":
        from commsched.runtime.data_parallel import DataParallel

        return DataParallel
    if name == "plan_for":
        from commsched.runtime.api import plan_for

        return plan_for
    if name == "load_plan":
        from commsched.io import load_plan

        return load_plan
    raise AttributeError(f"module 'commsched' has no attribute {name!r}")
