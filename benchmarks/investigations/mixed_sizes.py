"""Small all-reduces queued with large ones (issue 11, item 7): does a chain of small calls cost what
the cost table's chains of one size say when it shares gloo's queue with large calls?

Run on the emulated 2-node cluster (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 500 -- benchmarks/investigations/mixed_sizes.py [BIG_KIB]
Every case launches its all-reduces back to back (as DDP's reducer does) and waits for all; the
median over 10 repeats (after one warm-up) of the slowest rank's time. "hidden" is the share of the
small calls' own time (their chain alone) that the mixed launch did not add to the large calls'.
Why: stock DDP's pass with a bucket per gradient, most of it queued after compute at 500 Mbit/s,
ended 6-9.5% sooner than the simulator's sum of the table's times (BENCHMARKS.md).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

from commsched.runtime.lifecycle import end_process_group

SMALL_KIB = 2  # the median bucket of resnet18's, resnet50's and googlenet's pass with a bucket per gradient
REPEATS = 11


def slowest_median(values: list[float]) -> float:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def launched_together(bufs: list[torch.Tensor]) -> float:
    t0 = time.perf_counter()
    works = [dist.all_reduce(b, async_op=True) for b in bufs]
    for w in works:
        w.wait()
    return time.perf_counter() - t0


def main() -> None:
    dist.init_process_group("gloo")
    big_kib = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    bigs = [torch.ones(big_kib * 256) for _ in range(4)]
    smalls = [torch.ones(SMALL_KIB * 256) for _ in range(40)]
    cases = {
        "big x1": [bigs[0]],
        "small x20": smalls[:20],
        "big x1 then small x20": [bigs[0]] + smalls[:20],
        "small x20 then big x1": smalls[:20] + [bigs[0]],
        "big x4": bigs,
        "small x40": smalls,
        "(big, small x10) x4": [x for i in range(4) for x in [bigs[i]] + smalls[10 * i : 10 * i + 10]],
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(REPEATS):  # interleaved, so that drift hits every case alike
        for name, bufs in cases.items():
            dist.barrier()
            times[name].append(launched_together(bufs))
    med = {name: slowest_median(v[1:]) for name, v in times.items()}
    if dist.get_rank() == 0:
        print(f"{big_kib} KiB and {SMALL_KIB} KiB all-reduces, {dist.get_world_size()} ranks")
        for name, t in med.items():
            print(f"{name:28s} {t * 1e3:8.2f} ms")
        one, chain = med["big x1"], med["small x20"]
        mixed = med["big x1 then small x20"]
        print(f"big then chain: {mixed * 1e3:.1f} ms against {(one + chain) * 1e3:.1f} one after the other; hidden {1 - (mixed - one) / chain:+.0%}")
        four, chain40 = med["big x4"], med["small x40"]
        mixed = med["(big, small x10) x4"]
        print(f"interleaved: {mixed * 1e3:.1f} ms against {(four + chain40) * 1e3:.1f}; hidden {1 - (mixed - four) / chain40:+.0%}")
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
