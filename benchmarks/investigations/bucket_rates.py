"""How fast stock DDP's buckets go while backward compute runs, by bucket size (issue 11, item 7).

``validate`` fits a launch ratio at the median bucket of a pass with about 16 buckets
(``MID_PASS_BUCKETS``) and holds it flat for larger buckets. On the held-out models at 500 Mbit/s
(densenet161, convnext_tiny) that ratio came out 1.23-1.29 at about 7 MiB, and stock DDP's 26 MiB
buckets were then predicted 3-4% slow. This records, interleaved each round (every rank in
lockstep), steps of stock DDP with its default buckets ("stock") and with the mid pass's buckets
("mid"; "mid-bar" with a barrier before the step), each recorded by StepRecorder; validate's
launch pass with the mid pass's buckets ("pass": barrier, forward, backward, unrecorded, the
slowest rank's times) and the same pass without the barrier ("pass-free"; "pass-bar",
"pass-gather" and "pass-bar-gather" add validate's barrier and its gather of the times back,
rank 0's times); and chains of all-reduces alone at two sizes (the cost table's measure). An
optional fifth argument lists the kinds to run (default: stock, mid, mid-bar, pass, pass-free;
the chains always run). Around each step it reads this rank's TCP counters in its network
namespace (retransmitted segments, timeouts, loss probes, fast retransmits). It reports per
variant, as medians over rounds of rank 0's records:

- forward and backward end (the last gradient ready), the first launch and the last all-reduce's end;
- the all-reduces' execution (gloo's FIFO queue on its worker threads: a bucket starts when it is
  launched and a thread is free; the recorder stamps launches and ends), the link's idle time
  between the first start and the last end, and the sum of the buckets' times alone (T(b) = a + b x
  beta from the chains);
- ``extra``: the time in which something was in flight beyond that sum, in the part while compute
  ran and the part after it (each part's bytes estimated from the execution intervals, progress
  shared evenly among what is in flight), and the factor under compute this implies: the time in
  flight under compute over its work alone.

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 500 -- benchmarks/investigations/bucket_rates.py convnext_tiny 8 64 10
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
from commsched.planners import DDP
from commsched.profile.measure import measure_profile
from commsched.runtime.lifecycle import end_process_group
from commsched.runtime.record import StepRecorder
from commsched.calibrate import mid_pass_planner
from commsched.runtime.validate import LaunchSteps

MIB = 1 << 20
CHAIN_SIZES = (4 * MIB, 32 * MIB)
THREADS = 2  # ProcessGroupGloo's default
KINDS = ("stock", "mid", "mid-bar", "pass", "pass-free")


TCP_COUNTERS = ("RetransSegs", "TCPTimeouts", "TCPLossProbes", "TCPFastRetrans")


def tcp_counters() -> dict[str, int]:
    """This network namespace's TCP counters (/proc/net/snmp and /proc/net/netstat): retransmits."""
    got: dict[str, int] = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        lines = open(path).read().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            got.update(zip(head.split()[1:], (int(v) for v in vals.split()[1:])))
    return {k: got.get(k, 0) for k in TCP_COUNTERS}


def execution(launch: list[float], end: list[float], threads: int = THREADS) -> list[float]:
    """Execution starts of FIFO-queued all-reduces on ``threads`` workers from launches and ends."""
    free = [float("-inf")] * threads
    starts = []
    for lo, hi in zip(launch, end):
        k = min(range(threads), key=lambda i: free[i])
        starts.append(max(lo, free[k]))
        free[k] = hi
    return starts


def split(starts: list[float], ends: list[float], nbytes: list[int], cut: float) -> tuple[float, float, float, float]:
    """(time something ran before ``cut``, bytes done before it, time after, bytes after), each bucket's
    bytes progressing at an even share of the link among what is in flight."""
    events = sorted({*starts, *ends, cut})
    busy = [0.0, 0.0]
    moved = [0.0, 0.0]
    for a, b in zip(events, events[1:]):
        running = [j for j in range(len(starts)) if starts[j] <= a and ends[j] >= b]
        if not running:
            continue
        side = 0 if b <= cut else 1
        busy[side] += b - a
        for j in running:  # each bucket's own pace: its bytes over its whole execution
            moved[side] += nbytes[j] * (b - a) / (ends[j] - starts[j])
    return busy[0], moved[0], busy[1], moved[1]


def main() -> None:
    name, batch, image, rounds, model, inputs = setup(sys.argv)

    def loss_fn(out):
        return training_loss(name, out)

    order = measure_profile(model, inputs, loss_fn, name=name, batch_size=batch, warmup=1, iters=2)
    mid = mid_pass_planner(order)
    runs = {}
    for kind, planner in (("stock", DDP()), ("mid", mid)):
        ddp, opt = stock_ddp(model, planner, order)
        runs[kind] = (ddp, opt, StepRecorder(ddp, order=order.names))
    bufs = {s: [torch.ones(s // 4) for _ in range(2)] for s in CHAIN_SIZES}
    # validate's launch pass with the mid pass's buckets (barrier, forward, backward; unrecorded)
    launch_pass = LaunchSteps(order, copy.deepcopy(model), inputs, loss_fn, mid)
    # the same pass without the barrier before it (as a training step runs)
    free_pass = LaunchSteps(order, copy.deepcopy(model), inputs, loss_fn, mid)

    def pass_without_barrier(barrier: bool = False, gather: bool = False) -> tuple[float, float, int]:
        free_pass.ddp.zero_grad(set_to_none=True)
        free_pass.stamps.ready.clear()
        if barrier:
            dist.barrier()
        t0 = time.perf_counter()
        loss_fn(free_pass.ddp(*inputs)).backward()
        done = time.perf_counter()
        fwd, last = free_pass.stamps.since(t0)
        if gather:  # validate's gather of the times, for its traffic: the times kept are this rank's
            dist.all_gather_object([None] * dist.get_world_size(), (fwd, last))
        return last - fwd, done - t0 - fwd, 0

    def timed(kind: str) -> tuple:
        before = tcp_counters()
        out = _timed(kind)
        after = tcp_counters()
        return (*out, tuple(after[k] - before[k] for k in TCP_COUNTERS))

    def _timed(kind: str) -> tuple:
        if kind.startswith("chain"):
            b = bufs[int(kind[5:])]
            dist.barrier()
            t0 = time.perf_counter()
            for w in [dist.all_reduce(x, async_op=True) for x in b]:
                w.wait()
            return ((time.perf_counter() - t0) / len(b),)
        if kind == "pass":
            return launch_pass.sample()
        if kind.startswith("pass-"):
            return pass_without_barrier(barrier="bar" in kind, gather="gather" in kind)
        ddp, opt, rec = runs[kind.removesuffix("-bar")]
        opt.zero_grad(set_to_none=True)
        if kind.endswith("-bar"):
            dist.barrier()
        loss_fn(ddp(*inputs)).backward()
        opt.step()
        r = rec.records[-1]
        rec.records.clear()
        return (r.forward_end_s, max(t for t in r.ready_s if t == t), list(r.bucket_start_s), list(r.bucket_end_s), list(r.bucket_bytes), r.step_end_s)

    kinds = [*(sys.argv[5].split(",") if len(sys.argv) > 5 else KINDS), *(f"chain{s}" for s in CHAIN_SIZES)]
    for k in kinds:  # DDP rebuilds its buckets in ready order after the first step
        timed(k)
    everyone = interleaved(timed, kinds, rounds)
    if dist.get_rank() != 0:
        end_process_group(clean=True)
        return
    # T(b) = a + b beta through the two chain sizes (slowest rank per round, median over rounds)
    per = {s: statistics.median(max(r[f"chain{s}"][i][0] for r in everyone) for i in range(rounds)) for s in CHAIN_SIZES}
    (s1, t1), (s2, t2) = sorted(per.items())
    beta = (t2 - t1) / (s2 - s1)
    alpha = t1 - s1 * beta
    print(f"{name} batch {batch} image {image}, {rounds} rounds: chains alone a = {alpha * 1e3:.2f} ms, "
          f"{1 / beta / 1e6:.1f} MB/s ({', '.join(f'{s // MIB} MiB {t * 1e3:.1f} ms' for s, t in per.items())})")
    cols = ("fwd", "bwd_end", "first", "last", "idle", "sum_T", "busy_u", "alone_u", "busy_a", "alone_a", "factor_u", "factor_a")
    print(f"{'kind':6s} {'B':>3s} {'median MiB':>10s} " + " ".join(f"{c:>9s}" for c in cols))
    for kind in [k for k in kinds if k in ("stock", "mid", "mid-bar")]:
        rows = []
        for fwd, bwd, launch, end, nbytes, *_ in everyone[0][kind]:
            starts = execution(launch, end)
            busy_u, moved_u, busy_a, moved_a = split(starts, end, nbytes, bwd)
            # work alone of the bytes moved in each part (a per call, shared like the bytes)
            calls_u = sum(min(1.0, max(0.0, (bwd - s) / (e - s))) for s, e in zip(starts, end))
            alone_u = moved_u * beta + alpha * calls_u
            alone_a = moved_a * beta + alpha * (len(nbytes) - calls_u)
            span = max(end) - min(starts)
            rows.append((fwd, bwd, min(launch), max(end), span - busy_u - busy_a, sum(alpha + b * beta for b in nbytes),
                         busy_u, alone_u, busy_a, alone_a, busy_u / alone_u if alone_u > 0 else float("nan"),
                         busy_a / alone_a if alone_a > 0 else float("nan")))
        med = [statistics.median(r[i] for r in rows) for i in range(len(cols))]
        nb = everyone[0][kind][0][4]
        print(f"{kind:6s} {len(nb):3d} {statistics.median(nb) / MIB:10.1f} " + " ".join(f"{v * (1e3 if i < 10 else 1):9.{1 if i < 10 else 3}f}" for i, v in enumerate(med)))
    ends = {k: [r[5] - r[0] if not k.startswith("pass") else r[1] for r in everyone[0][k]] for k in kinds if not k.startswith("chain")}
    print("from the end of forward to the gradients back (pass: backward()'s return, the slowest rank's; pass-*: rank 0's), ms: "
          + ", ".join(f"{k} {statistics.median(v) * 1e3:.1f} [{min(v) * 1e3:.1f}, {max(v) * 1e3:.1f}]" for k, v in ends.items()))
    for k, v in ends.items():
        tcp = [r[-1] for r in everyone[0][k]]
        print(f"  {k:8s} per round: " + " ".join(f"{x * 1e3:.0f}" for x in v))
        print(f"  {'':8s} {'/'.join(TCP_COUNTERS)}: " + " ".join("/".join(map(str, c)) for c in tcp))
    print("times in ms since the start of forward; factor_u: time in flight under compute over its work alone (1: as the chains)")
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
