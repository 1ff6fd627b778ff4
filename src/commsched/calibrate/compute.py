"""Compute under all-reduces, and all-reduces under compute, from the probes' samples.

:func:`contention_of` turns the probe samples that :class:`commsched.runtime.validate.probes.Probe`
measures (plain dicts of seconds, from any ranks) into the runtime's measured numbers: compute's
slowdown under one all-reduce (c) and under two (c2), the per-size factor of all-reduces launched
under compute, and the concurrency gain of two all-reduces at once, each decided by its bootstrap
interval. Pure: no torch.
"""

from __future__ import annotations

import random
import statistics

from commsched.calibrate.bootstrap import interval95
from commsched.calibrate.launch import chain_factor

def contention_of(
    samples: list[dict], resamples: int = 0, threads: int = 1, seed: int = 0, decided: dict | None = None
) -> dict:
    """The semantics' measured numbers from :meth:`~commsched.runtime.validate.probes.Probe.sample` dicts (of any ranks): medians,
    then ratios. The gain's and c2's 95% bootstrap intervals decide whether they are used (else 0
    and None); ``decided`` (a previous result) imposes those decisions instead, so that a bootstrap
    of the prediction resamples the estimator that made it."""
    med = lambda key, i=None: statistics.median(s[key] if i is None else s[key][i] for s in samples)  # noqa: E731
    alone_b, under_b, overlap = med("backward_s"), med("backward_under_allreduce_s"), med("overlap_s")
    chain_keys = sorted((k for k in samples[0] if k.startswith("chain_")), key=lambda k: int(k[6:]))
    per_size = {k[6:]: (med(k, 0), med(k, 1)) for k in chain_keys}
    # the per-size factor of all-reduces launched under compute: the semantics' ``under_compute``
    factors = {k[6:]: chain_factor(*per_size[k[6:]], *((med(k, 2), samples[0][k][3]) if len(samples[0][k]) >= 4 else ())) for k in chain_keys}
    under_compute = [[int(k), f] for k, f in factors.items() if f is not None]
    pair_keys = [k for k in samples[0] if k.startswith("pair_")]

    def gain(ss) -> float:
        vals = [2 * statistics.median(s[k][0] for s in ss) / statistics.median(s[k][1] for s in ss) - 1 for k in pair_keys]
        return statistics.median(vals) if vals else 0.0

    g = gain(samples)
    lo = hi = g
    if resamples and len(samples) > 1:
        rng = random.Random(seed)
        lo, hi = interval95([gain([samples[rng.randrange(len(samples))] for _ in samples]) for _ in range(resamples)])
    if decided is not None:
        use_gain = decided["concurrency_gain"] > 0
    else:
        use_gain = threads > 1 and lo > 0
    used = min(1.0, max(0.0, g)) if use_gain else 0.0
    c1 = compute_slowdown(samples)
    c2 = compute_slowdown_two(samples, c1)
    diff_lo = diff_hi = None if c2 is None else c2 - c1
    if c2 is not None and resamples and len(samples) > 1:
        rng = random.Random(seed + 1)
        diffs = []
        for _ in range(resamples):
            pick = [samples[rng.randrange(len(samples))] for _ in samples]
            pc1 = compute_slowdown(pick)
            pc2 = compute_slowdown_two(pick, pc1)
            if pc2 is not None:
                diffs.append(pc2 - pc1)
        if diffs:
            diff_lo, diff_hi = interval95(diffs)
    # like the gain, c2 is used only where it differs from c1 beyond the noise (the interval of
    # c2 - c1 excludes 0): otherwise gloo's run is the serial one and ``optimal`` is exact for it
    if decided is not None:
        use_c2 = decided["compute_slowdown_concurrent"] is not None
    else:
        use_c2 = c2 is not None and threads > 1 and diff_lo is not None and not diff_lo <= 0 <= diff_hi
    c2_used = c2 if (use_c2 and c2 is not None) else None
    # reported, not (yet) in the semantics: the backward pass's time under a chain beyond what the
    # rate 1 / (1 + c) explains while the chain was in flight, per call (CPU time a call takes from
    # compute on the rank's core); None for probes that did not keep it
    compute_per_call = {}
    for k in chain_keys:
        if len(samples[0][k]) >= 4:
            calls = samples[0][k][3]
            under_chain = med(k, 2)
            in_flight = min(calls * med(k, 1), under_chain)
            compute_per_call[k[6:]] = (under_chain - alone_b - in_flight * c1 / (1.0 + c1)) / calls
    return {
        "threads": threads,
        "compute_alone_s": alone_b,
        "compute_under_allreduce_s": under_b,
        # compute ran at 1 / (1 + c) while the all-reduce was in flight (see compute_slowdown)
        "compute_slowdown": c1,
        "compute_slowdown_concurrent_measured": c2,
        "compute_slowdown_concurrent_minus_single_ci95": [diff_lo, diff_hi],
        "compute_slowdown_concurrent": c2_used,
        "compute_overlap_s": overlap,
        "under_compute": under_compute,
        # ratio: per call under compute over alone; factor: while compute ran (chain_factor)
        "allreduce_per_call_s": {
            k: {"alone": a, "under_compute": u, "ratio": u / a if a > 0 else None, "factor": factors[k]} for k, (a, u) in per_size.items()
        },
        "compute_per_call_s": compute_per_call or None,
        "concurrency_gain_measured": g,
        "concurrency_gain_ci95": [lo, hi],
        "concurrency_gain": used,
        "samples": len(samples),
    }



# a slower rate than this is read as "compute stopped" (a noisy median can imply a rate <= 0)
MAX_COMPUTE_SLOWDOWN = 50.0


def slowdown_of_rate(work_s: float, wall_s: float) -> float:
    """c such that ``work_s`` of uncontended compute took ``wall_s`` at the rate 1 / (1 + c)."""
    if wall_s <= 0:
        return 0.0
    if work_s <= wall_s / (1.0 + MAX_COMPUTE_SLOWDOWN):
        return MAX_COMPUTE_SLOWDOWN
    return max(0.0, wall_s / work_s - 1.0)


def compute_slowdown(samples: list[dict]) -> float:
    """c of the simulator's rate 1 / (1 + c) (:mod:`commsched.sim.events`), from medians.

    ``overlap_s`` is wall time, during the slowed backward pass, with the all-reduce in flight:
    the backward pass did ``alone - (under - overlap)`` of its uncontended work in those
    ``overlap`` seconds. (Reading under = alone + c x overlap instead, as this project did before,
    gives the fraction of the overlap lost, 1 - 1 / (1 + c): c = 0.48 where the rate model's c is
    0.92, and predictions of overlapped steps too short.)"""
    overlap = statistics.median(s["overlap_s"] for s in samples)
    under = statistics.median(s["backward_under_allreduce_s"] for s in samples)
    alone = statistics.median(s["backward_s"] for s in samples)
    return slowdown_of_rate(alone - (under - overlap), overlap) if overlap > 0 else 0.0


def compute_slowdown_two(samples: list[dict], c1: float) -> float | None:
    """c2 of the rate 1 / (1 + c2) while both all-reduces were in flight: the backward pass did
    ``alone - (under2 - any) - (any - two) / (1 + c1)`` of its work in the ``two`` seconds
    (wall times: ``any`` with at least one in flight, ``two`` with both)."""
    if "backward_under_two_s" not in samples[0]:
        return None
    med = lambda key: statistics.median(s[key] for s in samples)  # noqa: E731
    o2, o_any, under = med("overlap_two_s"), med("overlap_any_s"), med("backward_under_two_s")
    if o2 <= 0:
        return None
    work = med("backward_s") - (under - o_any) - max(0.0, o_any - o2) / (1.0 + c1)
    return slowdown_of_rate(work, o2)

