"""commsched: plan, simulate and apply the gradient-communication schedule of data-parallel training.

``import commsched`` is light (no torch): ``DataParallel``, ``TuneConfig``, ``ddp_options`` and ``plan_for`` load torch on first use.
"""

__version__ = "0.1.0"

__all__ = ["DataParallel", "TuneConfig", "TrialRule", "ddp_options", "load_plan", "plan_for"]

# Modules that moved into their layer's package (issue 32): the old spelling still imports, with a
# DeprecationWarning naming the new one (docs/api.md lists them).
MOVED_MODULES = {
    "commsched.io": "commsched.formats.io",
    "commsched.compare": "commsched.planners.compare",
    "commsched.whatif": "commsched.planners.whatif",
    "commsched.devices": "commsched.profile.devices",
    "commsched.emulate": "commsched.runtime.emulate",
    "commsched.ddp_buckets": "commsched.planners.stock_ddp",
    "commsched.planners.ddp": "commsched.planners.stock_ddp",
    "commsched.runtime.ddp": "commsched.runtime.data_parallel",
    "commsched.cost.contention": "commsched.cost.resource_models",
    "commsched.sim.contention": "commsched.sim.events",
    "commsched.runtime.bench_resources": "commsched.cost.resource_samples",
}


class _MovedModuleFinder:
    """Finds a moved module under its old name: the new module itself, after a DeprecationWarning."""

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED_MODULES:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        import importlib
        import sys
        import warnings

        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; the old name will go in a later release", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module):
        pass  # the new module is already executed


def _install_moved_module_finder() -> None:
    import sys

    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


_install_moved_module_finder()


def __getattr__(name: str):
    if name == "DataParallel":
        from commsched.runtime.data_parallel import DataParallel

        return DataParallel
    if name == "TuneConfig":
        from commsched.runtime.tune import TuneConfig

        return TuneConfig
    if name == "TrialRule":
        from commsched.calibrate.trial import TrialRule

        return TrialRule
    if name == "ddp_options":
        from commsched.runtime.data_parallel import ddp_options

        return ddp_options
    if name == "plan_for":
        from commsched.runtime.api import plan_for

        return plan_for
    if name == "load_plan":
        from commsched.formats.io import load_plan

        return load_plan
    raise AttributeError(f"module 'commsched' has no attribute {name!r}")
