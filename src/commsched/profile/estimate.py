"""Estimated profile from FLOPs: OSF Eq. 4-6 on a device preset. Pure Python, no torch.

OSF Eq. 4-6: T_comp = 3 T_forward; t_backward = 2 t_forward = 2 M C / (c pi), with M C a layer's
forward FLOPs, pi the device's peak FLOP/s and c the achieved fraction of it (the efficiency). So
the forward takes one third of the compute and each tensor's backward twice its forward FLOPs.

c is ResNet-50's (:mod:`commsched.profile.devices`). Models run at different FLOP rates (VGG at 2.3-3x
ResNet-50's, EfficientNet at a fifth), so the achieved rate is c x r x pi with r the model's FLOP
rate relative to that calibration, from a layer model of its forward kernels
(:func:`flop_rate_ratio`); r = 1 where the inventory has no kernels or the device no memory bandwidth.
"""

from __future__ import annotations

import math

from commsched.profile.devices import (
    CALIBRATED_EFFICIENCY,
    LAYER_COMPUTE_EFFICIENCY,
    LAYER_MEMORY_EFFICIENCY,
    WINOGRAD_MULTIPLY_REDUCTION,
    Device,
    device as lookup_device,
)
from commsched.errors import CommschedError
from commsched.models.inventory_types import ModelInventory
from commsched.types import MAX_BATCH_SIZE, MAX_SECONDS, MIN_COMPUTE_S, ModelProfile, TensorSpec, shown


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


def layer_compute_s(
    inv: ModelInventory,
    dev: Device,
    batch_size: int,
    *,
    compute_efficiency: float = LAYER_COMPUTE_EFFICIENCY,
    memory_efficiency: float = LAYER_MEMORY_EFFICIENCY,
    winograd: float = WINOGRAD_MULTIPLY_REDUCTION,
) -> float | None:
    """A training iteration's compute time at ``batch_size`` by the layer model; None where the
    inventory records no kernels or the device has no memory bandwidth.

    Each forward kernel k (:attr:`ModelInventory.kernels`) is a roofline (Williams, Waterman and
    Patterson, "Roofline", CACM 52(4), 2009): it takes the longer of its compute and its memory time,
    max(W_k / (e_c pi), B_k / (e_m beta)), since a kernel overlaps its loads with its arithmetic and
    is bound by the slower one; kernels on one stream run one after another, so their times add.
    W_k is its FLOPs, divided by ``winograd`` for a 3x3 stride-1 convolution (its Winograd multiply
    count); B_k its activation bytes (scaled with the batch like the FLOPs) plus its parameter bytes
    (not scaled); pi and beta the device's peak FLOP/s and memory bandwidth, e_c and e_m the fractions
    of them reached. The backward repeats the forward's work twice (OSF Eq. 4): compute = 3 x forward.
    """
    bandwidth = dev.memory_bandwidth_bytes_per_s
    if not inv.kernels or not (isinstance(bandwidth, (int, float)) and math.isfinite(bandwidth) and bandwidth > 0):
        return None
    scale = batch_size / inv.batch_size
    flops_per_s = compute_efficiency * dev.peak_flops
    bytes_per_s = memory_efficiency * bandwidth
    forward_s = 0.0
    for k in inv.kernels:
        work = k.flops * scale / (winograd if k.kind == "winograd" else 1.0)
        moved = k.batch_bytes * scale + k.fixed_bytes
        forward_s += max(work / flops_per_s, moved / bytes_per_s)
    return 3.0 * forward_s


def flop_rate_ratio(inv: ModelInventory, device: Device | str, batch_size: int) -> float:
    """The model's training FLOP rate at ``batch_size`` on ``device`` under the layer model
    (:func:`layer_compute_s`) relative to c x pi, the rate OSF Eq. 5 gives it with the calibrated
    efficiency: the factor r on c in :func:`estimate_profile`. 1 where the layer model has no input.

    ResNet-50 at the calibration's batch on a V100-SXM2 gets r = 1 (devices.LAYER_COMPUTE_EFFICIENCY
    is set so); VGG-16 on a V100S about 2.7, EfficientNet-B0 about 0.2.
    """
    dev = lookup_device(device) if isinstance(device, str) else device
    if not isinstance(dev, Device):
        raise CommschedError(f"device must be a Device or a preset name, got {device!r}")
    t = layer_compute_s(inv, dev, batch_size)
    if t is None or not t > 0:
        return 1.0
    flops = 3.0 * inv.forward_flops * batch_size / inv.batch_size
    r = flops / t / (CALIBRATED_EFFICIENCY * dev.peak_flops)
    return r if math.isfinite(r) and r > 0 else 1.0  # a FLOP-free model: no rate to speak of


def estimate_profile(
    inv: ModelInventory,
    device: Device | str,
    batch_size: int,
    efficiency: float = CALIBRATED_EFFICIENCY,
    dtype: str | None = None,
    flop_rate: float | None = None,
) -> ModelProfile:
    """Estimate a training step's forward and per-tensor backward times (``source="estimated"``).

    OSF Eq. 5: forward_s = F / (c r pi), F the model's forward FLOPs at ``batch_size``.
    OSF Eq. 6: tensor i's backward_s = 2 f_i / (c r pi), f_i its attributed forward FLOPs, so
    sum(backward_s) = 2 forward_s and compute = 3 forward_s (OSF Eq. 4).

    r (``flop_rate``) is the model's FLOP rate relative to the one c gives (c is calibrated on
    ResNet-50); None takes the layer model's (:func:`flop_rate_ratio`, which depends on the batch
    through the parameter bytes each kernel reads), 1 where the inventory records no kernels or the
    device no memory bandwidth. ``efficiency`` scales either way: half of c, twice the compute.

    FLOPs grow linearly with the batch (every layer's work is per sample), so an inventory taken at
    batch b is scaled by ``batch_size / b``; this lets a small-batch CPU inventory stand for a large
    GPU batch. Tensors with no attributed FLOPs get backward_s = 0 (ready together with the one
    before). ``device`` is a :class:`~commsched.profile.devices.Device` or a preset name. ``dtype`` (fp32,
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
    if flop_rate is not None and (
        isinstance(flop_rate, bool) or not isinstance(flop_rate, (int, float)) or not (math.isfinite(flop_rate) and 0 < flop_rate <= 100)
    ):
        raise CommschedError(f"flop_rate (the model's FLOP rate relative to ResNet-50's) must be in (0, 100], got {shown(flop_rate)}")
    if dtype is not None:
        gradient_bytes(1, dtype)  # names a bad dtype before any work
    if not math.isfinite(dev.peak_flops) or dev.peak_flops <= 0:
        raise CommschedError(f"device {dev.name!r} peak_flops must be > 0, got {dev.peak_flops!r}")
    if inv.forward_flops <= 0:  # elementwise layers only: FLOPs cannot spread any compute over the gradients
        raise CommschedError(
            f"model {inv.model!r} has no FLOPs torch's counter sees (no matrix products or convolutions), so its "
            "compute cannot be estimated from FLOPs; measure its profile instead (commsched profile --measure)"
        )
    r = flop_rate_ratio(inv, dev, batch_size) if flop_rate is None else flop_rate

    achieved_flops_per_s = c * float(r) * dev.peak_flops
    scale = batch_size / inv.batch_size
    # OSF Eq. 4: compute = 3 forward. A tiny efficiency or a huge batch or image makes it absurd (or,
    # with c near the smallest float, infinite): name the inputs rather than a derived field.
    compute_s = 3.0 * inv.forward_flops * scale / achieved_flops_per_s
    if not compute_s <= MAX_SECONDS:
        raise CommschedError(
            f"estimated compute of {inv.model!r} at batch {batch_size} on {dev.name} with efficiency {c:g}"
            f"{'' if r == 1 else f' and FLOP rate x{r:.4g}'} is "
            f"{compute_s:.4g} s per iteration, over the bound of {MAX_SECONDS:g} s (11.6 days)"
        )
    if not compute_s >= MIN_COMPUTE_S:  # a model of a few FLOPs: a step's overheads dwarf them
        raise CommschedError(
            f"estimated compute of {inv.model!r} at batch {batch_size} on {dev.name} is {compute_s:.3g} s per iteration "
            f"({3 * inv.forward_flops * scale:.3g} FLOPs), under {MIN_COMPUTE_S:g} s: a model that small is all overheads, "
            "which FLOPs do not see; measure its profile instead (commsched profile --measure)"
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
