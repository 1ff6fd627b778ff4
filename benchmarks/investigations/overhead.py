"""Overheads against stock DistributedDataParallel with its defaults (issue 11, items 2 and 6).

Four variants, one step of each in turn:

- ``stock DDP``: stock DDP with its defaults (instance A);
- ``recorded``: *the same DDP instance A* with :class:`commsched.runtime.record.StepRecorder`
  resumed (its process group between DDP's reducer and gloo stamps each bucket, post-accumulate
  hooks stamp every gradient); it is paused for A's stock steps, which then run exactly as
  without it. One instance for both, because two copies of one model can differ by 1-3% through
  a whole run on this machine (below), more than the recorder costs;
- ``DataParallel``: ``commsched.DataParallel(model, plan)`` with the ``ddp`` plan (DDP's own
  buckets, expressed as caps): a second instance, B; after construction it is stock DDP;
- ``stock DDP again``: a third instance, C, of stock DDP: C against A is the A/A comparison of two
  instances, the floor under any comparison of B with A.

Run on the emulated 2-node cluster (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 --timeout-s 2400 -- benchmarks/investigations/overhead.py resnet18 16 64 30
Arguments: model, batch size, image size (0 for token models), rounds, and options, comma-separated:
``view`` to run every variant with ``gradient_as_bucket_view=True``, ``wfbp`` to run every variant
with one bucket per gradient (``wfbp``'s plan through ``ddp_options``: the recorder's cost per
bucket, where a plan has the most buckets). Each round runs one step of each variant in turn,
``PAIRS`` times, the order rotated each time (A B C D, B C D A, ...) so that no variant always
runs first, after one untimed step of each. A step's time is the slowest rank's. Rank 0 prints each
variant's median [min, max] and the median of its per-slot ratios to the stock step of the same
slot, with a 95% bootstrap interval (neighbouring steps share the machine's slow and fast phases,
so paired ratios resolve less than the spread of either variant); ``DataParallel`` also against
the geometric mean of both stock instances of its slot; and the time spent in the recorder's own
calls per recorded step.
"""

from __future__ import annotations

import copy
import random
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.models import AlphaBeta
from commsched.models.zoo import build_model, example_input, training_loss
from commsched.planners import DDP, WFBP, make_plan
from commsched.profile.zoo_profile import zoo_profile
from commsched.runtime.data_parallel import DataParallel, ddp_options
from commsched.runtime.lifecycle import end_process_group
from commsched.runtime.record import StepRecorder

PAIRS = 4


def main() -> None:
    name, batch, image, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None, int(sys.argv[4])
    # "view": every variant with gradient_as_bucket_view=True (DDP then scales each bucket in place
    # instead of while copying gradients in)
    options = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else set()
    view, wfbp = "view" in options, "wfbp" in options
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    base = build_model(name)
    inputs = example_input(name, batch, image)
    profile = zoo_profile(name, batch, "V100", image_size=image)  # the ready order and sizes DDP buckets by
    plan = make_plan(WFBP() if wfbp else DDP(), profile, AlphaBeta(1e-3, 1e-9))  # neither layout depends on costs

    def variant(kind: str):
        m = copy.deepcopy(base)
        if kind == "DataParallel":
            wrapped = DataParallel(m, plan, gradient_as_bucket_view=view)
        else:
            caps = ddp_options(plan, m) if wfbp else {}
            wrapped = nn.parallel.DistributedDataParallel(m, gradient_as_bucket_view=view, **caps)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def step() -> float:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            training_loss(name, wrapped(*inputs)).backward()
            opt.step()
            return time.perf_counter() - t0

        return wrapped, step

    ddp_a, step_a = variant("stock DDP")
    recorder = StepRecorder(ddp_a, order=profile.names)
    recorder.pause()

    def recorded() -> float:
        recorder.resume()
        try:
            return step_a()
        finally:
            recorder.pause()

    variants = {"stock DDP": step_a, "recorded": recorded, "DataParallel": variant("DataParallel")[1], "stock DDP again": variant("stock DDP again")[1]}
    for step in variants.values():
        dist.barrier()
        step()
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(rounds):
        for p in range(PAIRS):
            shift = (r * PAIRS + p) % len(names)  # rotate the order: no variant always runs first
            for k in names[shift:] + names[:shift]:
                dist.barrier()
                times[k].append(variants[k]())
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, times)
    if dist.get_rank() == 0:
        slowest = {k: [max(t[k][i] for t in everyone) for i in range(len(times[k]))] for k in times}
        stock = slowest["stock DDP"]
        for k, ts in slowest.items():
            line = f"{name} {k}: {statistics.median(ts) * 1e3:.1f} ms [{min(ts) * 1e3:.1f}, {max(ts) * 1e3:.1f}] ({len(ts)} steps)"
            if k != "stock DDP":
                ratios = [b / a for a, b in zip(stock, ts)]
                lo, hi = interval(ratios)
                line += f"; vs stock DDP, median of paired ratios {statistics.median(ratios) - 1:+.2%} [{lo - 1:+.2%}, {hi - 1:+.2%}]"
            if k == "DataParallel":
                # against both stock instances of the same slot (their geometric mean)
                ratios = [b / (a * a2) ** 0.5 for a, a2, b in zip(stock, slowest["stock DDP again"], ts)]
                lo, hi = interval(ratios)
                line += f"; vs both stock DDP instances {statistics.median(ratios) - 1:+.2%} [{lo - 1:+.2%}, {hi - 1:+.2%}]"
            print(line, flush=True)
        own = recorder.own_s / len(recorder.records)  # every recorded step, the untimed first one included
        print(f"{name} recorded: the recorder's own calls took {own * 1e3:.3f} ms per step on rank 0 "
              f"({own / statistics.median(slowest['recorded']):.3%} of the median recorded step)")
        print(f"{name}: {len(plan.buckets)} buckets ({'wfbp' if wfbp else 'DDP'}'s), {profile.total_bytes / 2**20:.1f} MiB of gradients, gradient_as_bucket_view={view}")
    end_process_group(clean=True)


def interval(xs: list[float], resamples: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    meds = sorted(statistics.median(xs[rng.randrange(len(xs))] for _ in xs) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


if __name__ == "__main__":
    main()
