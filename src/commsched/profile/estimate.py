"""Estimated profile from FLOPs: OSF Eq. 4-6 on a device preset. Pure Python, no torch.

OSF Eq. 4-6: T_comp = 3 T_forward; t_backward = 2 t_forward = 2 M C / (c pi), with M C a layer's
forward FLOPs, pi the device's peak FLOP/s and c the achieved fraction of it (the efficiency). So
the forward takes one third of the compute and each tensor's backward twice its forward FLOPs.
"""

from __future__ import annotations

import math

from commsched.devices import CALIBRATED_EFFICIENCY, Device, device as lookup_device
from commsched.errors import CommschedError
from commsched.models.inventory_types import ModelInventory
from commsched.types import MAX_BATCH_SIZE, MAX_SECONDS, ModelProfile, TensorSpec, shown


def _check_efficiency(efficiency: float) -> float:
    if (
        not isinstance(efficiency, (int, float))
        or isinstance(efficiency, bool)
        or not math.isfinite(efficiency)
        or not 0 < efficiency <= 1
    ):
        raise CommschedError(f"efficiency c must be in (0, 1], got {shown(efficiency)}")
    return float(efficiency)


# bytes per gradient element: what an all-reduce of a gradient moves when training keeps (or casts)
# its gradients in that type (mixed precision's FP16 gradients, MG-WFBP Section 6 and the
# resource-sharing paper's runs); compute is not changed by it (device and efficiency set that)
GRADIENT_DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}


def gradient_bytes(numel: int, dtype: str) -> int:
    """A gradient tensor's bytes when its elements are ``dtype`` (one of :data:`GRADIENT_DTYPES`)."""
    if dtype not in GRADIENT_DTYPES:
        raise CommschedError(f"gradient dtype must be one of {', '.join(GRADIENT_DTYPES)}, got {shown(dtype)}")
    return numel * GRADIENT_DTYPES[dtype]


def estimate_profile(
    inv: ModelInventory,
    device: Device | str,
    batch_size: int,
    efficiency: float = CALIBRATED_EFFICIENCY,
    dtype: str | None = None,
) -> ModelProfile:
    """Estimate a training step's forward and per-tensor backward times (``source="estimated"``).

    OSF Eq. 5: forward_s = F / (c pi), F the model's forward FLOPs at ``batch_size``.
    OSF Eq. 6: tensor i's backward_s = 2 f_i / (c pi), f_i its attributed forward FLOPs, so
    sum(backward_s) = 2 forward_s and compute = 3 forward_s (OSF Eq. 4).

    FLOPs grow linearly with the batch (every layer's work is per sample), so an inventory taken at
    batch b is scaled by ``batch_size / b``; this lets a small-batch CPU inventory stand for a large
    GPU batch. Tensors with no attributed FLOPs get backward_s = 0 (ready together with the one
    before). ``device`` is a :class:`~commsched.devices.Device` or a preset name. ``dtype`` (fp32,
    fp16, bf16) sets the gradients' element type, so bytes = numel x its size; None keeps each
    tensor's own (the model's parameter dtype).
    """
    if not isinstance(inv, ModelInventory):
        raise CommschedError(f"estimate_profile needs a ModelInventory, got {type(inv).__name__}")
    dev = lookup_device(device) if isinstance(device, str) else device
    if not isinstance(dev, Device):
        raise CommschedError(f"device must be a Device or a preset name, got {device!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise CommschedError(f"batch_size must be a positive integer, got {shown(batch_size)}")
    if batch_size > MAX_BATCH_SIZE:
        raise CommschedError(f"batch_size must be at most 2**24 samples per worker, got {shown(batch_size)}")
    c = _check_efficiency(efficiency)
    if dtype is not None:
        gradient_bytes(1, dtype)  # names a bad dtype before any work
    if not math.isfinite(dev.peak_flops) or dev.peak_flops <= 0:
        raise CommschedError(f"device {dev.name!r} peak_flops must be > 0, got {dev.peak_flops!r}")

    achieved_flops_per_s = c * dev.peak_flops
    scale = batch_size / inv.batch_size
    # OSF Eq. 4: compute = 3 forward. A tiny efficiency or a huge batch or image makes it absurd (or,
    # with c near the smallest float, infinite): name the inputs rather than a derived field.
    compute_s = 3.0 * inv.forward_flops * scale / achieved_flops_per_s
    if not compute_s <= MAX_SECONDS:
        raise CommschedError(
            f"estimated compute of {inv.model!r} at batch {batch_size} on {dev.name} with efficiency {c:g} is "
            f"{compute_s:.4g} s per iteration, over the bound of {MAX_SECONDS:g} s (11.6 days)"
        )
    tensors = tuple(
        TensorSpec(
            name=t.name,
            bytes=t.bytes if dtype is None else gradient_bytes(t.numel, dtype),
            backward_s=2.0 * t.forward_flops * scale / achieved_flops_per_s,
        )
        for t in inv.tensors
    )
    return ModelProfile(
        model=inv.model,
        batch_size=batch_size,
        device=dev.name,
        source="estimated",
        forward_s=inv.forward_flops * scale / achieved_flops_per_s,
        tensors=tensors,
    )
