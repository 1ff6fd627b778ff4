"""The runtime's measured semantics (:class:`commsched.sim.semantics.Semantics`) from probe samples.

:func:`fit_semantics` is the whole fit from measured samples, without a run: the probes' numbers
(:func:`~commsched.calibrate.compute.contention_of`), then the launch costs fitted against a profile
and a cost table of the same minutes (:func:`~commsched.calibrate.launch.launch_costs`). Pure: no torch.
"""

from __future__ import annotations

from dataclasses import replace

from commsched.calibrate.compute import contention_of
from commsched.calibrate.launch import launch_costs
from commsched.sim.semantics import Semantics
from commsched.types import ModelProfile

def semantics_of(contention: dict, backend: str, launch_compute_s: float = 0.0) -> Semantics:
    """The measured semantics: the per-size factor under compute stands for the rate slowdown m
    of :mod:`commsched.sim.semantics` too (m stays 0: one model, not two); ``launch_compute_s`` and
    ``launch_factor_points`` (how DDP's buckets go under compute beside the chains) are :func:`launch_costs` (they
    need the profile and the cost table as well as the probes)."""
    threads = contention["threads"] if backend == "gloo" else 1
    return Semantics(
        "gloo" if backend == "gloo" else "nccl",
        threads,
        contention["concurrency_gain"] if threads > 1 else 0.0,
        contention["compute_slowdown"],
        0.0,
        0.0,
        contention["compute_slowdown_concurrent"] if threads > 1 else None,
        tuple((b, f) for b, f in contention["under_compute"]),
        launch_compute_s,
    )


def measured_semantics(
    samples: list[dict], contention: dict, backend: str, profile: ModelProfile, cost, finalize_s: float = 0.0
) -> Semantics:
    """:func:`semantics_of` with the launch costs of these probe samples (:func:`launch_costs`)
    against ``profile``, ``cost`` (the cost table of the same minutes) and ``finalize_s``."""
    sem = semantics_of(contention, backend)
    e, points = launch_costs(samples, sem, profile, cost, finalize_s)
    return replace(sem, launch_compute_s=e, call_overhead_s=0.0, launch_factor_points=points)


def fit_semantics(
    samples: list[dict], profile: ModelProfile, cost, backend: str, threads: int, finalize_s: float = 0.0, resamples: int = 200, seed: int = 0
) -> tuple[Semantics, dict]:
    """(the measured semantics, the probes' numbers) from probe samples of any ranks
    (:meth:`commsched.runtime.validate.probes.Probe.sample` dicts, or the ``raw.probes`` of a
    ``validate.json``), against ``profile`` and ``cost`` (the cost table of the same minutes) and
    ``finalize_s`` (DDP copying the gradients back): :func:`contention_of` with ``resamples``
    bootstrap resamples deciding the concurrency gain and c2, then :func:`measured_semantics`. What
    ``validate`` does with the probes of its rounds, callable from samples measured elsewhere."""
    contention = contention_of(samples, resamples, threads, seed)
    return measured_semantics(samples, contention, backend, profile, cost, finalize_s), contention
