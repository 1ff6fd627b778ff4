"""Torch-free records of a model's gradient tensors: what :func:`commsched.models.inventory` returns.

They live apart from the torch code so that pure stages (``commsched.profile.estimate``) can read an
inventory without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commsched.errors import CommschedError


def _check_count(what: str, value: int, *, allow_zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (value == 0 and not allow_zero):
        bound = "a non-negative" if allow_zero else "a positive"
        raise CommschedError(f"{what} must be {bound} integer, got {value!r}")


def _check_flops(what: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise CommschedError(f"{what} must be a finite number of FLOPs >= 0, got {value!r}")


@dataclass(frozen=True)
class GradTensor:
    """One trainable parameter's gradient.

    ``forward_flops`` is the share of the model's forward FLOPs (for the inventory's batch) that is
    attributed to this tensor: the forward FLOPs of the module whose backward makes this gradient
    ready. OSF Eq. 6 turns it into backward time, t_backward = 2 t_forward.
    """

    name: str
    bytes: int
    numel: int
    dtype: str
    forward_flops: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CommschedError(f"gradient tensor name must be a non-empty string, got {self.name!r}")
        _check_count(f"tensor {self.name!r} bytes", self.bytes)
        _check_count(f"tensor {self.name!r} numel", self.numel)
        if not isinstance(self.dtype, str) or not self.dtype:
            raise CommschedError(f"tensor {self.name!r} dtype must be a non-empty string, got {self.dtype!r}")
        _check_flops(f"tensor {self.name!r} forward_flops", self.forward_flops)


# Kinds of forward kernel work (commsched.profile.estimate's layer model prices each kind):
# "winograd": a dense 3x3 stride-1 convolution, which cuDNN can run with Winograd's fewer multiplies;
# "gemm": any other convolution (grouped and depthwise included) or matrix product (linear layers,
# attention); "memory": every other op that moves data (normalisation, activations, pooling,
# elementwise adds, softmax, copies), merged into one entry since it has no FLOPs.
KERNEL_KINDS = ("winograd", "gemm", "memory")


@dataclass(frozen=True)
class KernelWork:
    """Forward work of one kernel (or, for kind "memory", of all FLOP-free ops together) at the
    inventory's batch.

    ``flops`` are its torch.utils.flop_counter FLOPs; ``batch_bytes`` the bytes its inputs and outputs
    hold that grow with the batch (activations), ``fixed_bytes`` those that do not (the parameters and
    buffers it reads). Views move no bytes and are not counted.
    """

    kind: str
    flops: float
    batch_bytes: float
    fixed_bytes: float

    def __post_init__(self) -> None:
        if self.kind not in KERNEL_KINDS:
            raise CommschedError(f"kernel kind must be one of {', '.join(KERNEL_KINDS)}, got {self.kind!r}")
        _check_flops(f"{self.kind} kernel flops", self.flops)
        for what in ("batch_bytes", "fixed_bytes"):
            v = getattr(self, what)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise CommschedError(f"{self.kind} kernel {what} must be a finite number >= 0, got {v!r}")
        if self.kind == "memory" and self.flops:
            raise CommschedError(f"a memory kernel has no FLOPs, got {self.flops!r}")


@dataclass(frozen=True)
class ModelInventory:
    """A model's gradient tensors in the order their gradients become ready (first ready first).

    ``forward_flops`` is the whole forward pass for ``batch_size`` samples and equals the sum of the
    tensors' ``forward_flops``; ``parameters`` is the number of trainable elements (sum of ``numel``).
    ``kernels`` (optional, empty when unknown) splits the same forward pass by kernel kind for the
    layer model of :func:`commsched.profile.estimate.flop_rate_ratio`; when given, their FLOPs sum to
    ``forward_flops`` too.
    """

    model: str
    batch_size: int
    tensors: tuple[GradTensor, ...]
    forward_flops: float
    parameters: int
    kernels: tuple[KernelWork, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise CommschedError(f"model name must be a non-empty string, got {self.model!r}")
        _check_count(f"inventory of {self.model!r} batch_size", self.batch_size)
        object.__setattr__(self, "tensors", tuple(self.tensors))
        if not self.tensors:
            raise CommschedError(f"inventory of {self.model!r} has no gradient tensors")
        seen: set[str] = set()
        for t in self.tensors:
            if not isinstance(t, GradTensor):
                raise CommschedError(f"inventory of {self.model!r} holds {t!r}, not a GradTensor")
            if t.name in seen:
                raise CommschedError(f"inventory of {self.model!r} lists tensor {t.name!r} twice")
            seen.add(t.name)
        _check_flops(f"inventory of {self.model!r} forward_flops", self.forward_flops)
        attributed = sum(t.forward_flops for t in self.tensors)
        # Every counted FLOP belongs to exactly one tensor; otherwise OSF Eq. 6 (sum of backward =
        # 2 x forward) would not hold for the estimated profile.
        if not math.isclose(attributed, self.forward_flops, rel_tol=1e-9, abs_tol=0.5):
            raise CommschedError(
                f"inventory of {self.model!r}: tensors' forward_flops sum to {attributed!r}, "
                f"not the model's forward_flops {self.forward_flops!r}"
            )
        _check_count(f"inventory of {self.model!r} parameters", self.parameters)
        numel = sum(t.numel for t in self.tensors)
        if self.parameters != numel:
            raise CommschedError(
                f"inventory of {self.model!r}: parameters={self.parameters!r} but the tensors hold {numel} elements"
            )
        object.__setattr__(self, "kernels", tuple(self.kernels))
        for k in self.kernels:
            if not isinstance(k, KernelWork):
                raise CommschedError(f"inventory of {self.model!r} holds kernel {k!r}, not a KernelWork")
        in_kernels = sum(k.flops for k in self.kernels)
        if self.kernels and not math.isclose(in_kernels, self.forward_flops, rel_tol=1e-9, abs_tol=0.5):
            raise CommschedError(
                f"inventory of {self.model!r}: kernels' flops sum to {in_kernels!r}, "
                f"not the model's forward_flops {self.forward_flops!r}"
            )

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)
