"""`profile --from-trace` against `profile --measure` on one model (issue 13, item 4).

Rounds alternate (A B, B A, ...): a training loop recorded by torch.profiler (1 warm-up and 3
active steps, `record_shapes=True`), turned into a profile by `commsched.profile.from_trace`, and
`measure_profile` (post-accumulate-grad hooks, 1 warm-up and 3 steps) on the same model and input.
Prints trace / measure for forward and total backward (median [min, max] over rounds) and whether
the tensor order is the same. glibc's malloc settings change the profiled run (see the README's
`--from-trace` limits); run it under both.

Usage: .venv/bin/python benchmarks/investigations/from_trace_vs_measure.py MODEL IMAGE_SIZE|- ROUNDS [BATCH]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from commsched.models.inventory import sum_of_means
from commsched.models.zoo import build_model, example_input
from commsched.profile.from_trace import load_trace, module_params, parse_trace, profile_from_trace
from commsched.profile.measure import measure_profile

STEPS = 3


def record(model, x, path: Path) -> None:
    """A user's loop under the profiler: zero_grad, forward, loss, backward, prof.step()."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1)) as prof:
        for _ in range(1 + STEPS):
            model.zero_grad(set_to_none=True)
            sum_of_means(model(x)).backward()
            prof.step()
    prof.export_chrome_trace(str(path))


def main() -> None:
    name, rounds = sys.argv[1], int(sys.argv[3])
    size = None if sys.argv[2] == "-" else int(sys.argv[2])  # "-": a token model (bert_small)
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    torch.set_num_threads(1)  # as the tests: one intra-op thread on a 2-core machine
    torch.manual_seed(0)
    model = build_model(name)
    (x,) = example_input(name, batch, size)
    params = module_params(model, (x,), name=name)
    fwd, bwd, same = [], [], True
    tmp = Path(tempfile.mkdtemp())
    for k in range(rounds):
        got = {}
        for which in ("measure", "trace") if k % 2 == 0 else ("trace", "measure"):
            if which == "measure":
                got["measure"] = measure_profile(model, (x,), name=name, warmup=1, iters=STEPS)
            else:
                path = tmp / f"trace{k}.json"
                record(model, x, path)
                got["trace"] = profile_from_trace(parse_trace(load_trace(path), str(path)), params, model=name, batch_size=batch).profile
        m, t = got["measure"], got["trace"]
        fwd.append(t.forward_s / m.forward_s)
        bwd.append(t.backward_s / m.backward_s)
        same = same and t.names == m.names
    med = statistics.median
    print(
        f"{name} ({len(params)} tensors, {'tokens' if size is None else f'{size}x{size}'}, batch {batch}, {rounds} rounds): same tensor order {same}; "
        f"trace / measure forward {med(fwd):.3f} [{min(fwd):.3f}, {max(fwd):.3f}], backward {med(bwd):.3f} [{min(bwd):.3f}, {max(bwd):.3f}]"
    )


if __name__ == "__main__":
    main()
