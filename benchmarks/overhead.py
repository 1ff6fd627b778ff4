"""Runtime overhead: commsched.DataParallel with DDP's own bucket layout vs stock DistributedDataParallel.

Run on the emulated 2-node cluster (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/overhead.py resnet18 16 64 20
Arguments: model, batch size, image size (0 for token models), rounds. Each round runs one warm-up
and four timed steps of each variant, interleaved (A B A B ...); rank 0 prints the median [min, max]
step time of each and the ratio of medians.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from commsched.cost.models import AlphaBeta
from commsched.models.zoo import build_model, example_input, training_loss
from commsched.planners import DDP, make_plan
from commsched.profile.zoo_profile import zoo_profile
from commsched.runtime.data_parallel import DataParallel
from commsched.runtime.lifecycle import end_process_group


def main() -> None:
    name, batch, image, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None, int(sys.argv[4])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    base = build_model(name)
    inputs = example_input(name, batch, image)
    profile = zoo_profile(name, batch, "V100", image_size=image)  # the ready order and sizes DDP buckets by
    plan = make_plan(DDP(), profile, AlphaBeta(1e-3, 1e-9))  # DDP's layout does not depend on costs

    def variant(kind: str):
        m = copy.deepcopy(base)
        wrapped = nn.parallel.DistributedDataParallel(m) if kind == "stock DDP" else DataParallel(m, plan)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def step() -> float:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            training_loss(name, wrapped(*inputs)).backward()
            opt.step()
            return time.perf_counter() - t0

        return step

    variants = {k: variant(k) for k in ("stock DDP", "commsched (DDP's buckets)")}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, step in variants.items():
            dist.barrier()
            step()
            times[k] += [step() for _ in range(4)]
    if dist.get_rank() == 0:
        for k, ts in times.items():
            print(f"{name} {k}: {statistics.median(ts) * 1e3:.1f} ms [{min(ts) * 1e3:.1f}, {max(ts) * 1e3:.1f}] ({len(ts)} steps)")
        ratio = statistics.median(times["commsched (DDP's buckets)"]) / statistics.median(times["stock DDP"]) - 1
        print(f"{name} overhead of commsched vs stock DDP: {ratio:+.1%} ({len(plan.buckets)} buckets)")
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
