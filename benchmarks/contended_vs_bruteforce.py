"""How close the `contended` planner's local search comes to the true optimum under contention.

Run: .venv/bin/python benchmarks/contended_vs_bruteforce.py [--cases 2000] [--max-tensors 10]
Random profiles of 2..max-tensors tensors (bytes log-uniform 4 B..64 MB, backward times
log-uniform 10 us..50 ms, forward 1-100 ms), alpha-beta costs (alpha 10 us..5 ms, beta for
0.1-10 Gbit/s) and slowdowns (compute 0..1, all-reduce 0..0.5); each compared with brute force over
all 2^(L-1) contiguous bucketings scored by the contention-aware simulator. Prints how often the
search misses the optimum and by how much, and how often the plain `optimal` is beaten.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics

from commsched.cost.models import AlphaBeta
from commsched.planners.contended import Contended
from commsched.planners.optimal import Optimal
from commsched.sim.contention import simulate_contended
from commsched.types import ModelProfile, TensorSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--max-tensors", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    gaps, plain_gaps = [], []
    for _ in range(args.cases):
        n = rng.randint(2, args.max_tensors)
        tensors = tuple(
            TensorSpec(f"t{i}", int(4 * 10 ** rng.uniform(0, 7.2)), 10 ** rng.uniform(-5, -1.3)) for i in range(n)
        )
        p = ModelProfile("random", 1, "cpu", "estimated", 10 ** rng.uniform(-3, -1), tensors)
        cost = AlphaBeta(10 ** rng.uniform(-5, -2.3), 8 / (10 ** rng.uniform(8, 10)))
        cs, ms = rng.uniform(0, 1), rng.uniform(0, 0.5)

        def score(ends):
            return simulate_contended(p, ends, cost, cs, ms).iteration_s

        best = min(
            score(tuple(k for k, cut in zip(range(1, n), cuts) if cut) + (n,))
            for cuts in itertools.product((0, 1), repeat=n - 1)
        )
        gaps.append(score(Contended(cs, ms).ends(p, cost)) / best - 1)
        plain_gaps.append(score(Optimal().ends(p, cost)) / best - 1)
    for name, g in (("contended (local search)", gaps), ("optimal (plain simulator)", plain_gaps)):
        missed = [x for x in g if x > 1e-9]
        print(
            f"{name}: optimal under contention in {len(g) - len(missed)}/{len(g)} cases; "
            f"when not, median {statistics.median(missed) if missed else 0:.2%}, max {max(g):.2%} slower"
        )


if __name__ == "__main__":
    main()
