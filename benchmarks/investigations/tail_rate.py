"""How fast queued small all-reduces go once backward compute has ended (issue 11, item 7).

A many-bucket plan (``wfbp``: one bucket per gradient) launches its all-reduces during the backward
pass faster than they complete; the ones still queued when compute ends complete after it. Small
all-reduces are about twice as fast under compute as alone on the emulated cluster (``validate``'s
per-size factor), so the simulator must say at which speed the queued ones go once compute has
ended. This measures it, every rank in lockstep, interleaved each round:

- "alone": a chain of N 16 KiB all-reduces launched back to back with nothing else running;
- "under": the same chain launched at the start of a backward pass, N sized so that it outlasts
  the pass: per-call time of the calls that end during the pass, and of those that end after it
  (the pass is timed from the first launch, so it includes launching the chain);
- "ddp": one step of stock DDP with one bucket per gradient (``wfbp``'s plan), recorded: per-call
  time while the pass runs (time some bucket was in flight over the buckets that ended in it) and
  of the buckets that end after the last gradient is ready;
- "backward", "long", "ddp1": the backward pass alone, under one 256 MiB all-reduce, and in stock
  DDP with one bucket (no all-reduce in flight during it): compute's slowdown c (the rate
  1 / (1 + c)) under the long all-reduce, under the chain and under wfbp's buckets (against
  "ddp1", whose backward pass copies the gradients into a bucket as wfbp's does).

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/tail_rate.py mobilenet_v2 16 64 12
Rank 0 prints medians over rounds of the slowest rank, with min and max.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from _rounds import interleaved, setup

from commsched.models.zoo import training_loss
from commsched.runtime.lifecycle import end_process_group
from commsched.runtime.record import StepRecorder, union_of

SMALL = 16 * 1024
FIRST = 32  # validate's probe chains: the calls at the start of the pass


def chain(bufs: list[torch.Tensor]) -> tuple:
    """Launch one all-reduce per buffer back to back; (launch time, each call's end time (filled in
    as they complete), the works, their stamping futures)."""
    ends = [0.0] * len(bufs)
    t0 = time.perf_counter()
    works = [dist.all_reduce(b, async_op=True) for b in bufs]
    futs = [w.get_future().then(lambda _f, i=i: ends.__setitem__(i, time.perf_counter())) for i, w in enumerate(works)]
    return t0, ends, works, futs


def per_call(ends: list[float], start: float, stop: float) -> tuple[float, int]:
    """Seconds per call of the calls that ended in (start, stop]: the span from start to the last of
    them over their count (nan when none)."""
    inside = sorted(e for e in ends if start < e <= stop)
    return ((inside[-1] - start) / len(inside), len(inside)) if inside else (float("nan"), 0)


def main() -> None:
    name, batch, image, rounds, model, inputs = setup(sys.argv)

    def backward_alone() -> float:
        loss = training_loss(name, model(*inputs))
        dist.barrier()
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    for _ in range(2):
        backward = backward_alone()
    probe = [torch.zeros(SMALL // 4) for _ in range(64)]
    t0, ends, works, futs = chain(probe)
    for w, f in zip(works, futs):
        w.wait()
        f.wait()
    call_s = max(ends) - t0
    # long enough to outlast the pass even at three times the speed alone; the same on every rank
    n = int(dist_max([min(max(backward * 4.0 / (call_s / len(probe)), 16.0), 2000.0)])[0])
    long_msg = torch.zeros(2**26)  # 256 MiB: outlasts the backward pass at 2 Gbit/s
    bufs = [torch.zeros(SMALL // 4) for _ in range(n)]

    params = [p for p in model.parameters() if p.requires_grad]
    ddp_model = copy.deepcopy(model)
    order: list[int] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i)) for i, p in enumerate(params)]
    model.zero_grad(set_to_none=True)
    training_loss(name, model(*inputs)).backward()
    for h in hooks:
        h.remove()
    ddp_params = [p for p in ddp_model.parameters() if p.requires_grad]
    caps = [ddp_params[i].numel() * ddp_params[i].element_size() / 2**20 for i in order]
    ddp = DistributedDataParallel(ddp_model, bucket_cap_mb_list=caps)
    recorder = StepRecorder(ddp)
    # stock DDP with one bucket: its backward pass copies every gradient into the bucket as wfbp's
    # does, and launches its one all-reduce after the last gradient (how validate profiles compute)
    one_model = copy.deepcopy(model)
    one = DistributedDataParallel(one_model, bucket_cap_mb=sum(caps) + 1)
    one_recorder = StepRecorder(one)

    def timed(kind: str) -> tuple:
        if kind == "backward":
            return backward_alone(), float("nan"), 0, float("nan"), 0
        if kind == "long":  # under one long all-reduce (in flight through the whole pass)
            model.zero_grad(set_to_none=True)
            loss = training_loss(name, model(*inputs))
            dist.barrier()
            work = dist.all_reduce(long_msg, async_op=True)
            t0 = time.perf_counter()
            loss.backward()
            b = time.perf_counter() - t0
            work.wait()
            return b, float("nan"), 0, float("nan"), 0
        if kind == "alone":
            dist.barrier()
            t0, ends, works, futs = chain(bufs)
            for w, f in zip(works, futs):
                w.wait()
                f.wait()
            return (max(ends) - t0) / len(bufs), float("nan"), 0, float("nan"), 0
        if kind == "under":
            model.zero_grad(set_to_none=True)
            loss = training_loss(name, model(*inputs))
            dist.barrier()
            t0, ends, works, futs = chain(bufs)
            loss.backward()
            t1 = time.perf_counter()
            for w, f in zip(works, futs):
                w.wait()
                f.wait()
            during, k_during = per_call(ends, t0, t1)
            after, k_after = per_call(ends, t1, max(ends))
            first = sorted(ends)[FIRST - 1] - t0 if len(ends) >= FIRST else float("nan")
            return during, after, k_after, t1 - t0, k_during, first / FIRST
        net, rec = (ddp, recorder) if kind == "ddp" else (one, one_recorder)
        net.zero_grad(set_to_none=True)
        dist.barrier()  # before the forward, as in training: the pass is timed from the forward's end
        training_loss(name, net(*inputs)).backward()
        r = rec.records[-1]
        rec.records.clear()
        t0, t1 = r.forward_end_s, max(x for x in r.ready_s if x == x)  # NaN: a parameter without a gradient
        after, k_after = per_call(list(r.bucket_end_s), t1, max(r.bucket_end_s))
        # while the pass runs: time some bucket was in flight over the buckets that ended in it
        spans = [(max(a, t0), min(b, t1)) for a, b in zip(r.bucket_start_s, r.bucket_end_s) if b > t0 and a < t1]
        k_during = sum(t0 < b <= t1 for b in r.bucket_end_s)
        during = sum(b - a for a, b in union_of(spans)) / k_during if k_during else float("nan")
        return during, after, k_after, t1 - t0, k_during

    kinds = ["alone", "under", "ddp", "backward", "long", "ddp1"]
    everyone = interleaved(timed, kinds, rounds)
    if dist.get_rank() == 0:

        def stat(kind: str, field: int) -> str:
            vals = [max(g[kind][i][field] for g in everyone) for i in range(rounds)]
            vals = [v for v in vals if v == v]
            if not vals:
                return "-"
            return f"{statistics.median(vals) * 1e3:.3f} ms [{min(vals) * 1e3:.3f}, {max(vals) * 1e3:.3f}]"

        print(f"{name}: {n} calls of {SMALL // 1024} KiB per chain, {len(params)} gradients; {rounds} rounds")
        print(f"  alone: per call {stat('alone', 0)}")
        b0 = [max(g['backward'][i][0] for g in everyone) for i in range(rounds)]
        b1 = [max(g['ddp1'][i][3] for g in everyone) for i in range(rounds)]
        print(f"  backward alone {statistics.median(b0) * 1e3:.1f} ms; in stock DDP with one bucket {statistics.median(b1) * 1e3:.1f} ms")
        for kind, field, base in (("long", 0, b0), ("under", 3, b0), ("ddp", 3, b1)):
            # the pass had something in flight from start to end: its rate is 1 / (1 + c)
            cs = [max(g[kind][i][field] for g in everyone) / a - 1 for i, a in enumerate(base)]
            print(f"  c under {kind}: {statistics.median(cs):.3f} [{min(cs):.3f}, {max(cs):.3f}]")
        print(f"  under a backward pass: per call while it runs {stat('under', 0)}, after it {stat('under', 1)}"
              f" ({statistics.median(g['under'][i][2] for g in everyone for i in range(rounds)):.0f} calls after;"
              f" backward {stat('under', 3)})")
        print(f"  under a backward pass: per call of its first {FIRST} calls {stat('under', 5)}")
        print(f"  stock DDP, one bucket per gradient: per call while the pass runs (time in flight over buckets ended) {stat('ddp', 0)}"
              f" ({statistics.median(g['ddp'][i][4] for g in everyone for i in range(rounds)):.0f} buckets)")
        print(f"  stock DDP, one bucket per gradient: per call after the last gradient {stat('ddp', 1)}"
              f" ({statistics.median(g['ddp'][i][2] for g in everyone for i in range(rounds)):.0f} buckets after;"
              f" backward {stat('ddp', 3)})")
    end_process_group(clean=True)


def dist_max(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


if __name__ == "__main__":
    main()
