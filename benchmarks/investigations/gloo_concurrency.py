"""Gloo's execution semantics, measured (issue 11, item 3): do concurrent all-reduces gain, and do
they slow compute more than one does?

Run on the emulated 2-node cluster (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/gloo_concurrency.py
1. For messages of 4 KiB to 64 MiB: one all-reduce alone, two one after the other, and two launched
   together (gloo runs them on its two worker threads at once); median over repeats of the slowest
   rank's time. gain = 2 x one / together - 1 (0: they share the link; 1: they do not slow each other).
2. resnet18 (batch 16, 64x64) backward pass alone, under one 160 MB all-reduce launched at its start,
   and under two; compute slowdown c of the rate 1 / (1 + c) while the all-reduce was in flight
   during the backward pass (c2: while both were), as `validate` estimates them.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torchvision

from commsched.runtime.lifecycle import end_process_group
from commsched.calibrate import slowdown_of_rate


def slowest_median(values: list[float]) -> float:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def timed(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return slowest_median(out)


def pairs() -> None:
    for kib in (4, 64, 1024, 4096, 16384, 65536):
        a, b = torch.ones(kib * 256), torch.ones(kib * 256)
        repeats = 15 if kib <= 4096 else 5

        def together() -> None:
            w1, w2 = dist.all_reduce(a, async_op=True), dist.all_reduce(b, async_op=True)
            w1.wait()
            w2.wait()

        one = timed(lambda: dist.all_reduce(a), repeats)
        serial = timed(lambda: (dist.all_reduce(a), dist.all_reduce(b)), repeats)
        both = timed(together, repeats)
        if dist.get_rank() == 0:
            print(
                f"| {kib} KiB | {one * 1e3:.2f} | {serial * 1e3:.2f} | {both * 1e3:.2f} | {2 * one / both - 1:+.2f} |",
                flush=True,
            )


def compute_under_allreduces(reps: int = 8) -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    x = torch.randn(16, 3, 64, 64)
    for _ in range(2):
        model(x).sum().backward()
    big = [torch.zeros(40 * 2**20) for _ in range(2)]  # 160 MB each: outlasts the backward pass
    backward = {0: [], 1: [], 2: []}
    overlap_any = {1: [], 2: []}
    overlap_both = {2: []}
    for _ in range(reps):
        for n in (0, 1, 2):
            loss = model(x).sum()
            dist.barrier()
            ends: list[float] = []
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, async_op=True) for b in big[:n]]
            futs = [w.get_future().then(lambda _f: ends.append(time.perf_counter())) for w in works]
            loss.backward()
            b = time.perf_counter() - t0
            for w, f in zip(works, futs):
                w.wait()
                f.wait()
            backward[n].append(b)
            if n:
                overlap_any[n].append(min(max(ends) - t0, b))
            if n == 2:
                overlap_both[2].append(min(min(ends) - t0, b))
    alone = slowest_median(backward[0])
    under1, o1 = slowest_median(backward[1]), slowest_median(overlap_any[1])
    under2, o_any, o_both = slowest_median(backward[2]), slowest_median(overlap_any[2]), slowest_median(overlap_both[2])
    # compute at 1 / (1 + c) while in flight (the simulator's rate, as validate estimates it): the
    # work done during the overlap is what the time outside it did not do
    c1 = slowdown_of_rate(alone - (under1 - o1), o1)
    c2 = slowdown_of_rate(alone - (under2 - o_any) - max(0.0, o_any - o_both) / (1 + c1), o_both)
    if dist.get_rank() == 0:
        print(
            f"\nresnet18 backward: alone {alone * 1e3:.1f} ms; under one all-reduce {under1 * 1e3:.1f} ms "
            f"(overlap {o1 * 1e3:.1f} ms): c = {c1:.2f}; under two {under2 * 1e3:.1f} ms (both in flight "
            f"{o_both * 1e3:.1f} ms, at least one {o_any * 1e3:.1f} ms): c2 = {c2:.2f}; {reps} repeats each, slowest rank's median",
            flush=True,
        )


def main() -> None:
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        print("| message | one ms | two, one after the other, ms | two launched together ms | gain |")
        print("|---|---|---|---|---|")
    pairs()
    compute_under_allreduces()
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
