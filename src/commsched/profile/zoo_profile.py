"""Estimated profiles of zoo models, and of the user's own models by import path: build, inventory
at a small batch, scale (torch).

The inventory is taken at batch 2 (BatchNorm needs more than one sample per channel in training
mode); :func:`~commsched.profile.estimate.estimate_profile` scales its FLOPs linearly to the
requested batch. It runs on torch's ``meta`` device by default: an estimated profile needs shapes,
FLOPs and the order of gradient readiness, all of which meta tensors give (the autograd engine runs
the same graph in the same order, FlopCounterMode counts from shapes) without initialising or
computing any values, which takes VGG-16 from ~2-4 s to ~0.03 s. A test pins that the meta
inventory equals the CPU one for every zoo model.
"""

from __future__ import annotations

import torch

from commsched.profile.devices import CALIBRATED_EFFICIENCY, device
from commsched.models.inventory import inventory
from commsched.models.inventory_types import ModelInventory
from commsched.models.zoo import build_model, example_input, runs_on, training_loss
from commsched.profile.estimate import estimate_profile
from commsched.types import ModelProfile

INVENTORY_BATCH = 2
SEED = 0


def zoo_inventory(
    name: str, image_size: int | None = None, batch: int = INVENTORY_BATCH, on_device: str = "meta"
) -> ModelInventory:
    """Inventory of zoo model ``name`` at ``batch`` samples (default image size when None), run on
    torch device ``on_device`` ("meta": shapes only, fast; "cpu": real values).

    On the CPU, weights are initialised under a forked RNG seeded with 0, so the result is
    deterministic and the caller's global torch RNG state is left as it was.
    """
    inputs = example_input(name, batch, image_size)  # on the CPU: it validates batch and image size
    with torch.random.fork_rng(devices=[]), torch.device(on_device):
        torch.manual_seed(SEED)
        model = build_model(name)
        inputs = tuple(x.to(on_device) for x in inputs)
        with runs_on(name, inputs):
            return inventory(model, inputs, loss_fn=lambda out: training_loss(name, out), name=name)


def zoo_profile(
    name: str,
    batch_size: int,
    device_name: str,
    image_size: int | None = None,
    efficiency: float | None = None,
    dtype: str | None = None,
) -> ModelProfile:
    """Estimated profile (OSF Eq. 4-6) of zoo model ``name`` at ``batch_size`` on preset ``device_name``.

    ``efficiency`` None means the calibrated c (:data:`~commsched.profile.devices.CALIBRATED_EFFICIENCY`),
    scaled by the model's FLOP rate from its kernels (:func:`~commsched.profile.estimate.flop_rate_ratio`);
    ``dtype`` the gradients' element type (None: the zoo's fp32 parameters).
    """
    dev = device(device_name)  # fail on a bad name before spending CPU time on the model
    inv = zoo_inventory(name, image_size=image_size)
    c = CALIBRATED_EFFICIENCY if efficiency is None else efficiency
    return estimate_profile(inv, dev, batch_size, efficiency=c, dtype=dtype)


def factory_profile(
    spec: str,
    batch_size: int,
    device_name: str,
    image_size: int | None = None,
    efficiency: float | None = None,
    dtype: str | None = None,
) -> tuple[ModelProfile, str]:
    """Estimated profile (OSF Eq. 4-6) of the model ``package.module:factory`` builds
    (:func:`commsched.models.source.build`) at ``batch_size`` on preset ``device_name``, as
    :func:`zoo_profile` makes a zoo model's: the inventory is one real step on the CPU (a user's model
    may not run on the meta device), its generators seeded with 0 and restored after, at
    ``INVENTORY_BATCH`` samples where the factory takes a ``batch_size``, else at its own inputs'
    batch, and its FLOPs are scaled to ``batch_size``. ``dtype`` None keeps the model's own gradient
    bytes. Returns the profile and a note naming an ``image_size`` the factory did not take (else "")."""
    from commsched.models.source import build, check_every_gradient, dtypes_note, forked_rng, ignored_note, runs_on

    dev = device(device_name)
    with forked_rng():
        built = build(spec, INVENTORY_BATCH, image_size)
        with runs_on(spec, built.inputs):
            inv = inventory(built.model, built.inputs, loss_fn=built.loss_fn, name=spec, batch_size=built.batch_size)
    check_every_gradient(spec, built.model, (t.name for t in inv.tensors), "a plan made here")
    c = CALIBRATED_EFFICIENCY if efficiency is None else efficiency
    notes = [ignored_note(spec, built, None, image_size), "" if dtype else dtypes_note(spec, (t.dtype for t in inv.tensors))]
    return estimate_profile(inv, dev, batch_size, efficiency=c, dtype=dtype), "\n".join(n for n in notes if n)
