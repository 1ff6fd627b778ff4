"""How much backward compute slows under all-reduces of different sizes that cover the whole pass
(issue 11, item 7).

``validate`` measures compute's slowdown c under one long all-reduce launched at the start of a
backward pass (sized to outlast it). On convnext_tiny at 2 Gbit/s c came out 0.82, and stock DDP's
recorded steps (six buckets of about 25 MiB, in flight for nearly all of the pass) ended backward
11% sooner than c predicts. This times, interleaved each round (every rank in lockstep, the slowest
rank's times; a barrier before each probe pass, none before the DDP steps, which run as training does):

- "alone": a backward pass with nothing in flight;
- "long": the same with one all-reduce of LONG bytes launched at its start (validate's probe);
- "chain-S": with LONG bytes in all-reduces of S bytes launched together at its start (gloo's queue
  runs two at a time), for S in SIZES;
- "ddp-rec": "ddp" recorded by StepRecorder, for the time a bucket was in flight during the pass F,
  and c of the simulator's rate model: ddp1's work W took the pass P with F of it at 1 / (1 + c);
- "ddp1" and "ddp": a training step's backward pass (end of forward to the last gradient ready) of
  stock DDP with one bucket (nothing in flight during the pass) and with its default buckets.

Every all-reduce set should outlast the pass (printed: the passes whose all-reduces were done
within 1 ms of ``backward()``'s return, the slowest rank's each), so c =
pass / alone - 1 for them; for "ddp", c = ddp / ddp1 - 1 is what DDP's buckets cost the pass,
including the first few milliseconds before its first bucket.

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/compute_under_sizes.py convnext_tiny 8 64 10 2000
(the fifth argument: the link's rate in Mbit/s, which sizes LONG; default 2000)
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch
import torch.distributed as dist

from _rounds import interleaved, setup, stock_ddp

from commsched.models.zoo import training_loss
from commsched.planners import DDP, SyncEASGD
from commsched.profile.measure import measure_profile
from commsched.runtime.lifecycle import end_process_group
from commsched.runtime.record import StepRecorder, union_of

MIB = 1 << 20
SIZES = (1 * MIB, 4 * MIB, 25 * MIB)


def main() -> None:
    name, batch, image, rounds, model, inputs = setup(sys.argv)
    rate_mbit = float(sys.argv[5]) if len(sys.argv) > 5 else 2000.0

    def loss_fn(out):
        return training_loss(name, out)

    order = measure_profile(model, inputs, loss_fn, name=name, batch_size=batch, warmup=1, iters=2)
    probe = copy.deepcopy(model)
    # LONG outlasts the pass three times over at the link's rate, capped at 256 MiB, as validate's probe
    long_bytes = int(min(2**28, 3 * order.backward_s * rate_mbit * 1e6 / 8)) // (4 * MIB) * 4 * MIB
    sets = {"long": [torch.zeros(long_bytes // 4)]}
    for s in SIZES:
        sets[f"chain-{s // MIB}"] = [torch.zeros(s // 4) for _ in range(max(1, long_bytes // s))]
    steps = {}
    for kind, planner in (("ddp1", SyncEASGD()), ("ddp", DDP()), ("ddp-rec", DDP())):
        ddp, opt = stock_ddp(model, planner, order)
        stamp = {"forward": 0.0, "ready": 0.0}
        ddp.register_forward_hook(lambda *_, s=stamp: s.__setitem__("forward", time.perf_counter()))
        for p in ddp.module.parameters():
            p.register_post_accumulate_grad_hook(lambda _p, s=stamp: s.__setitem__("ready", time.perf_counter()))
        steps[kind] = (ddp, opt, stamp, StepRecorder(ddp, order=order.names) if kind == "ddp-rec" else None)

    def timed(kind: str) -> tuple:
        if kind in steps:
            ddp, opt, stamp, rec = steps[kind]
            opt.zero_grad(set_to_none=True)
            loss_fn(ddp(*inputs)).backward()
            opt.step()
            if rec is None:
                return stamp["ready"] - stamp["forward"], 0.0
            r = rec.records[-1]
            rec.records.clear()
            last = max(t for t in r.ready_s if t == t)
            flight = sum(max(0.0, min(e, last) - max(a, r.forward_end_s)) for a, e in union_of(list(zip(r.bucket_start_s, r.bucket_end_s))))
            return last - r.forward_end_s, flight
        probe.zero_grad(set_to_none=True)
        loss = loss_fn(probe(*inputs))
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.all_reduce(b, async_op=True) for b in sets.get(kind, [])]
        loss.backward()
        t1 = time.perf_counter()
        for w in works:
            w.wait()
        return t1 - t0, time.perf_counter() - t0

    kinds = ["alone", *sets, "ddp1", "ddp", "ddp-rec"]
    everyone = interleaved(timed, kinds, rounds)
    if dist.get_rank() == 0:
        per = {k: [max(r[k][i][0] for r in everyone) for i in range(rounds)] for k in kinds}
        whole = {k: [max(r[k][i][1] for r in everyone) for i in range(rounds)] for k in kinds}
        alone = statistics.median(per["alone"])
        print(f"{name} batch {batch} image {image}, {rounds} rounds, LONG {long_bytes / MIB:.0f} MiB: backward pass, "
              "median [min, max] ms, and c = median / reference - 1")
        for k in kinds[:-1]:
            ref = statistics.median(per["ddp1"]) if k == "ddp" else alone
            med = statistics.median(per[k])
            early = sum(w - p < 1e-3 for w, p in zip(whole[k], per[k])) if k in sets else 0
            print(f"  {k:10s} {med * 1e3:7.1f} [{min(per[k]) * 1e3:6.1f}, {max(per[k]) * 1e3:6.1f}]  c = {med / ref - 1:6.3f}"
                  + (f"  (all-reduces done within 1 ms of the pass's end in {early} of {rounds})" if k in sets else ""))
        # the rate model: W of work took P seconds, F of them with a bucket in flight at 1 / (1 + c)
        w = statistics.median(per["ddp1"])
        cs = [f / (w - (p - f)) - 1 if f > 0 and w > p - f else float("nan") for p, f in zip(per["ddp-rec"], whole["ddp-rec"])]
        print(f"  ddp-rec    {statistics.median(per['ddp-rec']) * 1e3:7.1f}, a bucket in flight {statistics.median(whole['ddp-rec']) * 1e3:.1f} ms of it:"
              f" c of the rate model against ddp1's work {statistics.median(cs):.3f} [{min(cs):.3f}, {max(cs):.3f}]")
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
