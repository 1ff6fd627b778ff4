"""Where a training step of a many-bucket plan spends its time, against what validate's launch pass
measures (issue 11, item 7).

``validate`` fits the launch costs e and d to one unrecorded pass of stock DDP with one bucket per
gradient (``wfbp``'s plan): a barrier, forward, backward, no optimizer. The prediction of a
training step is then the profile's forward, that pass's backward to the return of ``backward()``,
and the profile's optimizer. This times each phase of, interleaved each round (every rank in
lockstep, the slowest rank's times):

- "one": a training step of stock DDP with one bucket (the profile steps' DDP);
- "wfbp": a training step of stock DDP with one bucket per gradient (as validate's rounds run it);
- "wfbp-bar": the same with a barrier before it;
- "pass": validate's launch pass (barrier, forward, backward; no optimizer step).

Phases: forward (to the DDP forward hook), backward (from there to the return of ``backward()``),
optimizer (``zero_grad`` and ``step``), and the whole step.

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/step_phases.py mobilenet_v2 16 64 16
"""

from __future__ import annotations

import statistics
import sys
import time

import torch.distributed as dist

from _rounds import interleaved, setup, stock_ddp

from commsched.models.zoo import training_loss
from commsched.planners import WFBP, SyncEASGD
from commsched.profile.measure import measure_profile
from commsched.runtime.lifecycle import end_process_group

KINDS = ["one", "wfbp", "wfbp-bar", "pass"]
PHASES = ("forward", "backward", "optimizer", "step")


def main() -> None:
    name, batch, image, rounds, model, inputs = setup(sys.argv)

    def loss_fn(out):
        return training_loss(name, out)

    order = measure_profile(model, inputs, loss_fn, name=name, batch_size=batch, warmup=1, iters=2)
    runs = {}
    for kind, planner in (("one", SyncEASGD()), ("wfbp", WFBP()), ("wfbp-bar", WFBP()), ("pass", WFBP())):
        ddp, opt = stock_ddp(model, planner, order)
        stamp = {"forward": 0.0}
        ddp.register_forward_hook(lambda *_, s=stamp: s.__setitem__("forward", time.perf_counter()))
        runs[kind] = (ddp, opt, stamp)

    def timed(kind: str) -> tuple:
        ddp, opt, stamp = runs[kind]
        if kind in ("wfbp-bar", "pass"):
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(*inputs)).backward()
        t1 = time.perf_counter()
        if kind != "pass":
            opt.step()
        t2 = time.perf_counter()
        return stamp["forward"] - t0, t1 - stamp["forward"], t2 - t1, t2 - t0

    for k in KINDS:  # DDP rebuilds its buckets in ready order after the first step
        timed(k)
    everyone = interleaved(timed, KINDS, rounds)
    if dist.get_rank() == 0:
        print(f"{name} batch {batch} image {image}: medians over {rounds} rounds of the slowest rank [min, max], ms")
        print(f"{'kind':10s}" + "".join(f"{p:>26s}" for p in PHASES))
        for k in KINDS:
            per_round = [tuple(max(r[k][i][j] for r in everyone) for j in range(4)) for i in range(rounds)]
            cells = []
            for j in range(4):
                v = [x[j] * 1e3 for x in per_round]
                cells.append(f"{statistics.median(v):8.1f} [{min(v):6.1f}, {max(v):6.1f}]")
            print(f"{k:10s}" + "".join(f"{c:>26s}" for c in cells))
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
