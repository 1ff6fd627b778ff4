"""How much memory a ``validate`` run needs, against what the machine has (pure: no torch).

A run holds, at its peak (every rank alike, :mod:`commsched.runtime.validate.probes`): one copy of
the weights shared by every model, the weights they started from, the SGD momentum, the gradients of
the one model running, and one DDP reducer's buckets (a gradient copy) for the profile steps and each
of the two launch passes: 7 model copies (``FIXED_COPIES``); the DDP of the one variant (a strategy,
or stock DDP) whose turn it is, made for its turn and let go after it (``TURN_COPIES``), whatever the
number of strategies; the activations of one training step; and the probe's messages
(:func:`comm_bytes`). The ranks that share a machine (by its kernel's boot id, so that the nodes of
``commsched emulate``, network namespaces of one machine, count together) share its available memory.

:func:`estimate` makes the numbers and :func:`check` refuses, in one line, a run that cannot fit.
Measured (peak resident memory, ``validate --model resnet152 --batch-size 16 --image-size 64
--rounds 3 --steps 2`` on two gloo ranks of this machine, 2026-11-27): 4.06 GiB with one strategy
(``ddp``) and 4.57 GiB with five (``optimal,ddp,mgwfbp,wfbp,synceasgd``), where the estimate, added
to what the rank held when it was made (0.95 GiB), comes to 4.8 GiB for either; with every variant's
DDP kept for the whole run (before 2026-11-27) the five peaked at 5.49 GiB and each variant added
1.0-1.7 model copies; before the models shared their weights, 14.9 GiB.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from commsched.calibrate.cost_table import GAIN_SIZES, LONG_MESSAGE_MAX_BYTES, chain_bytes_at_most, chain_length, probe_sizes
from commsched.errors import CommschedError

# model copies held whatever the number of variants: the shared weights, the weights they started
# from, the momentum, the running model's gradients, and the reducer buckets of the profile steps and
# the two launch passes
FIXED_COPIES = 7
# model copies of the variant whose turn it is: its reducer's buckets, the buckets DDP rebuilds in
# its second step (made before the first ones go), and what the allocator keeps of the buckets and
# gradients of variants of other sizes (measured: four strategies more added 2.1 copies to
# resnet152's peak, module docstring; more strategies may add some), with a copy to spare
TURN_COPIES = 4
# a training step's peak beyond its gradients over the tensors its forward saves for the backward
# pass, the weights left out (the gradients of the activations while they are made, allocator slack):
# measured 1.10 on resnet152 (batch 16, 224 px) and 1.29 on resnet50 (batch 16, 64 px), one CPU step
# each from a fresh process (VmHWM reset), rounded up
ACTIVATION_PEAK = 1.3


def comm_bytes(gradient_bytes: int) -> int:
    """The probe's messages at most, for a model with ``gradient_bytes`` of gradients: two long
    all-reduces of at most ``LONG_MESSAGE_MAX_BYTES``; per probe size the longest chain
    :func:`~commsched.calibrate.cost_table.chain_calls` allows and the cost table's chain; two
    all-reduces per gain size; and the cost benchmark's largest message."""
    sizes = probe_sizes(-(-gradient_bytes // 4) * 4)
    chains = sum(chain_bytes_at_most(s) + chain_length(s) * s for s in sizes)
    return 2 * LONG_MESSAGE_MAX_BYTES + chains + 2 * sum(GAIN_SIZES) + min(gradient_bytes, LONG_MESSAGE_MAX_BYTES)


@dataclass(frozen=True)
class MemoryEstimate:
    """What one rank of a run needs beyond what it holds when the estimate is made (the model
    built, torch loaded): ``copies`` model copies of ``param_bytes`` (one of them, the weights
    themselves, already held), the activations of one step and the probe's messages. ``variants``
    (the strategies and stock DDP) is recorded; the copies do not depend on it."""

    param_bytes: int
    activation_bytes: int
    variants: int
    comm_bytes: int

    @property
    def copies(self) -> float:
        return FIXED_COPIES + TURN_COPIES

    @property
    def need_bytes(self) -> int:
        """Bytes one rank still has to allocate."""
        return int((self.copies - 1) * self.param_bytes + ACTIVATION_PEAK * self.activation_bytes + self.comm_bytes)

    def to_json(self) -> dict:
        return {
            "param_bytes": self.param_bytes,
            "model_copies": self.copies,
            "variants": self.variants,
            "activation_bytes": self.activation_bytes,
            "comm_bytes": self.comm_bytes,
            "need_bytes": self.need_bytes,
        }


def estimate(param_bytes: int, gradient_bytes: int, activation_bytes: int, variants: int) -> MemoryEstimate:
    """The estimate for a model of ``param_bytes`` (``gradient_bytes`` of them trainable) whose
    forward pass keeps ``activation_bytes``, run with ``variants`` variants (the strategies and stock DDP)."""
    return MemoryEstimate(param_bytes, activation_bytes, variants, comm_bytes(gradient_bytes))


def gib(b: float) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{b / 2**30:.1f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def check(est: MemoryEstimate, machines: dict[str, tuple[int, int]], model: str, batch_size: int) -> None:
    """Refuse, in one line naming the numbers, when some machine's ranks need more than it has.
    ``machines``: per machine, (ranks on it, its available bytes)."""
    for ranks, available in machines.values():
        need = ranks * est.need_bytes
        if need > available:
            copies_b, acts_b = (est.copies - 1) * est.param_bytes, ACTIVATION_PEAK * est.activation_bytes
            # the copies are fixed (one variant's DDP at a time): only the batch moves the activations
            advice = "a smaller --batch-size or fewer ranks per machine" if acts_b >= copies_b else "fewer ranks per machine (the model's copies take most of it)"
            raise CommschedError(
                f"validate would need about {gib(need)} more memory on a machine that has {gib(available)} available "
                f"(MemAvailable): {ranks} rank{'s' if ranks > 1 else ''} x ({est.copies - 1:g} model copies of {gib(est.param_bytes)} "
                f"+ {gib(ACTIVATION_PEAK * est.activation_bytes)} of activations of {model} at batch "
                f"{batch_size} + {gib(est.comm_bytes)} of probe messages); run {advice}"
            )


def available_bytes() -> int | None:
    """This machine's ``MemAvailable`` (/proc/meminfo), None where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def machine_id() -> str:
    """What identifies this machine among the ranks: the running kernel's boot id (the same in every
    network namespace of the machine), else its host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return os.uname().nodename


def rss_bytes() -> tuple[int, int] | None:
    """This process's resident memory now and at its peak (VmRSS, VmHWM), None where not readable."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def machines_of(reports: list[tuple[str, int | None]]) -> dict[str, tuple[int, int]]:
    """Per machine, (its ranks, the least bytes any of them saw available), from every rank's
    (:func:`machine_id`, :func:`available_bytes`); machines where none could read it are left out."""
    out: dict[str, tuple[int, int]] = {}
    for mid, avail in reports:
        ranks, least = out.get(mid, (0, None))
        least = avail if least is None else least if avail is None else min(least, avail)
        out[mid] = (ranks + 1, least)
    return {k: v for k, v in out.items() if v[1] is not None}
