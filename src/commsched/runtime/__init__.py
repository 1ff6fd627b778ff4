"""Runtime (torch.distributed): measure the all-reduce of a real process group, apply plans.

Import-light on purpose: importing this package imports nothing, so ``commsched emulate`` and the
pure stages pay for torch only in the submodule that needs it.
Import from the submodules, e.g. ``from commsched.runtime.bench_comm import bench_allreduce``.
"""
