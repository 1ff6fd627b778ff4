"""A small synthetic `validate` run, as measured numbers (no torch, no process group): what the pure
calibration and the validate.json document are tested on."""

from __future__ import annotations

import random

from commsched.calibrate import STOCK, ProfileSteps, contention_of, measured_semantics
from commsched.calibrate.report import header
from commsched.cost.cluster import ClusterSpec
from commsched.cost.models import Table
from commsched.formats.io import plan_to_json
from commsched.planners import DDP, SyncEASGD, make_plan
from commsched.types import ModelProfile, TensorSpec

KIB = 1024
ORDER = ModelProfile(
    "toy", 4, "cpu", "measured", 0.02,
    tuple(TensorSpec(f"layer{i}.weight", b, 0.0) for i, b in enumerate((64 * KIB, 16 * KIB, 256 * KIB, 4 * KIB, 128 * KIB, 512 * KIB))),
)
TABLE = Table((4, 16 * KIB, 128 * KIB, 1 << 20), (2e-4, 4e-4, 1.2e-3, 6e-3))
STRATEGIES = ("synceasgd", "ddp")
ROUNDS, STEPS, RANKS = 3, 2, 2


def probe_sample(rng: random.Random) -> dict:
    """One probe sample of the kind Probe.sample measures, with some noise."""
    j = lambda x: x * (1 + 0.05 * rng.random())  # noqa: E731
    return {
        "backward_s": j(0.05), "backward_under_allreduce_s": j(0.065), "overlap_s": j(0.05),
        "backward_under_two_s": j(0.07), "overlap_two_s": j(0.03), "overlap_any_s": j(0.05),
        f"chain_{16 * KIB}": (j(4e-4), j(6e-4), j(0.055), 8), f"chain_{128 * KIB}": (j(1.2e-3), j(1.6e-3), j(0.06), 4),
        f"anchor_{16 * KIB}": j(4.2e-4), f"anchor_{128 * KIB}": j(1.25e-3),
        f"pair_{1 << 20}": (j(6e-3), j(1.1e-2)),
        "launch_pass": (j(0.052), j(0.06), 5), "launch_pass_mid": (j(0.051), j(0.058), 3),
    }


def profile_steps(n: int, rng: random.Random, lights: int) -> ProfileSteps:
    """``n`` profile steps (every rank's, combined) and ``lights`` light steps."""
    ready = []
    for _ in range(n):
        t, row = 0.02, []
        for _ in ORDER.tensors:
            t += 0.008 * (1 + 0.1 * rng.random())
            row.append(t)
        ready.append(tuple(row))
    return ProfileSteps(
        ORDER, tuple(0.02 for _ in range(n)), tuple(ready), tuple(0.003 for _ in range(n)), tuple(0.001 for _ in range(n)),
        tuple(0.045 * (1 + 0.1 * rng.random()) for _ in range(lights)),
    )


def synthetic_run(seed: int = 0) -> dict:
    """Everything build_report takes, for ``ROUNDS`` rounds of ``STEPS`` steps on ``RANKS`` ranks:
    head, steps (the rounds' ProfileSteps), probes, measured, light_before, threads; and before
    (the ProfileSteps before the rounds)."""
    rng = random.Random(seed)
    threads = 2
    before_probes = [probe_sample(rng) for _ in range(4 * RANKS)]
    before = profile_steps(8, rng, 8)
    cluster = ClusterSpec("measured-2x-gloo-runtime", RANKS, TABLE, source="synthetic")
    contention = contention_of(before_probes, 20, threads)
    sem = measured_semantics(before_probes, contention, "gloo", before.profile(), TABLE, before.finalize())
    plans = {name: make_plan(p, before.profile(), TABLE, sem) for name, p in zip(STRATEGIES, (SyncEASGD(), DDP()))}
    head = header(
        model="toy", batch_size=4, image_size=32, world_size=RANKS, backend="gloo", rounds=ROUNDS, steps_per_round=STEPS,
        min_gain=0.03, profile_before=before.profile(), cluster=cluster, fit={"model": "alpha_beta"},
        comm_samples={"sizes_bytes": list(TABLE.bytes), "time_s": list(TABLE.seconds)}, semantics_before=sem,
        contention_before={**contention, "long_message_bytes": 1 << 20, "chain_calls": {"16384": 8}, "long_message_ended_early": 0},
        plans={name: plan_to_json(plan) for name, plan in plans.items()},
        probe={"long_message_bytes": 1 << 20, "chain_calls": {"16384": 8}, "long_message_ended_early": 1},
    )
    names = [*STRATEGIES, STOCK]
    light_before: dict[str, list[int]] = {k: [] for k in names}
    k = 0
    for _ in range(ROUNDS):
        for name in names:
            light_before[name].append(k)
            k += 1
    measured = {name: [0.1 * (1 + 0.05 * rng.random()) for _ in range(ROUNDS * STEPS)] for name in names}
    return {
        "head": head, "steps": profile_steps(ROUNDS * STEPS, rng, k), "probes": [probe_sample(rng) for _ in range(ROUNDS * RANKS)],
        "measured": measured, "light_before": light_before, "threads": threads, "before": before,
    }
