"""What one all-reduce call costs the backward pass beside it, launched one at a time as gradients
become ready (as DDP launches many small buckets) against the same calls launched back to back at
the start of the pass (as ``validate``'s chain probes launch them). Issue 11, item 7: the cause of
the many-bucket prediction errors.

Run on the emulated cluster (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 2000 -- benchmarks/investigations/per_call_compute.py mobilenet_v2 16 64 12

Each round, every rank in lockstep, interleaved: a backward pass alone (B0); under one long
all-reduce launched at its start (compute slowdown c, as ``validate`` estimates it); with one
16 KiB all-reduce launched from each parameter's post-accumulate-grad hook ("spaced": n calls,
one per gradient, in ready order); with the same n calls launched at its start ("chained"); and a
step of stock DDP with one bucket per gradient (wfbp's plan), recorded by StepRecorder ("ddp":
its backward pass is from the end of forward to the last gradient, so it includes DDP's copies).
Every call's launch and end are stamped, so the time some call was in flight during the pass is
known. Under the simulator's rate model (compute at 1 / (1 + c) while a call is in flight) a pass
that had calls in flight for fl of its u seconds did (u - fl) + fl / (1 + c) of work; that minus
B0, divided by n, is the compute each call costs beyond the rate model. Last, the simulator
predicts the spaced pass from numbers measured in the same run (the alone pass's ready times, the
per-call time of the n calls back to back alone and their factor under a backward pass, c).
Rank 0 prints medians over rounds of the slowest rank.
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


def in_flight(spans: list[list[float]], start: float, end: float) -> float:
    """Time within [start, end] during which at least one span is open."""
    clipped = [(max(s, start), min(e, end)) for s, e in spans if e > start and s < end]
    return sum(e - s for s, e in union_of(clipped))


def main() -> None:
    name, batch, image, rounds, model, inputs = setup(sys.argv)
    params = [p for p in model.parameters() if p.requires_grad]
    n = len(params)
    small = [torch.zeros(SMALL // 4) for _ in range(n)]
    long_msg = torch.zeros(2**26)  # 256 MiB: outlasts the backward pass at 2 Gbit/s
    spans: list[list[float]] = []
    mode = {"spaced": False}

    def launch(buf: torch.Tensor) -> object:
        entry = [time.perf_counter(), float("inf")]
        spans.append(entry)
        work = dist.all_reduce(buf, async_op=True)
        work.get_future().add_done_callback(lambda _f: entry.__setitem__(1, time.perf_counter()))
        return work

    pending: list = []
    ready: list[float] = []
    ready_index: list[int] = []

    def make_hook(i: int):
        def hook(_p):
            ready.append(time.perf_counter())
            ready_index.append(i)
            if mode["spaced"]:
                pending.append(launch(small[i]))
        return hook

    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(make_hook(i))

    # stock DDP with one bucket per gradient (wfbp's plan: a cap per tensor, in ready order) on a
    # copy of the model, recorded: the same n calls launched by DDP's reducer, with the gradients'
    # own sizes
    model.zero_grad(set_to_none=True)
    training_loss(name, model(*inputs)).backward()
    order = list(ready_index)
    ready.clear()
    ready_index.clear()
    ddp_model = copy.deepcopy(model)
    ddp_params = [p for p in ddp_model.parameters() if p.requires_grad]
    caps = [ddp_params[i].numel() * ddp_params[i].element_size() / 2**20 for i in order]
    ddp = DistributedDataParallel(ddp_model, bucket_cap_mb_list=caps)
    recorder = StepRecorder(ddp)

    def timed(kind: str) -> tuple:
        """(backward s, time some call was in flight during it, end of the last call, gradient
        ready times), times since the start of the backward pass; for "one call", the time of one
        call alone and the time per call of the n calls back to back alone."""
        if kind == "ddp":
            ddp.zero_grad(set_to_none=True)
            loss = training_loss(name, ddp(*inputs))
            dist.barrier()
            loss.backward()
            r = recorder.records[-1]
            recorder.records.clear()
            backward = max(r.ready_s) - r.forward_end_s
            spans_ = [(s - r.forward_end_s, e - r.forward_end_s) for s, e in zip(r.bucket_start_s, r.bucket_end_s)]
            return backward, in_flight(spans_, 0.0, backward), max(r.bucket_end_s) - r.forward_end_s, []
        if kind == "one call":  # one 16 KiB all-reduce alone, then the n calls back to back alone
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(small[0])
            one = time.perf_counter() - t0
            dist.barrier()
            t0 = time.perf_counter()
            for w in [dist.all_reduce(b, async_op=True) for b in small]:
                w.wait()
            return one, (time.perf_counter() - t0) / n
        model.zero_grad(set_to_none=True)
        loss = training_loss(name, model(*inputs))
        spans.clear()
        pending.clear()
        ready.clear()
        dist.barrier()
        t0 = time.perf_counter()
        if kind == "long":
            pending.append(launch(long_msg))
        elif kind == "chained":
            pending.extend(launch(b) for b in small)
        mode["spaced"] = kind == "spaced"
        loss.backward()
        t1 = time.perf_counter()
        mode["spaced"] = False
        for w in pending:
            w.wait()
        deadline = time.perf_counter() + 1.0
        while any(e[1] == float("inf") for e in spans) and time.perf_counter() < deadline:
            time.sleep(0)
        last = max((e for _, e in spans), default=t1)
        return t1 - t0, in_flight(spans, t0, t1), last - t0, [r - t0 for r in ready]

    kinds = ["alone", "long", "spaced", "chained", "one call", "ddp"]
    everyone = interleaved(timed, kinds, rounds)
    if dist.get_rank() == 0:
        # per round, the slowest rank's pass (and that rank's time in flight)
        worst = {k: [max((g[k][i] for g in everyone), key=lambda x: x[0]) for i in range(rounds)] for k in kinds if k != "one call"}
        b0 = [w[0] for w in worst["alone"]]
        # rate model (the simulator's): compute runs at 1 / (1 + c) while a call is in flight, so a
        # pass of B0 work that had a call in flight for fl of its u seconds did (u - fl) + fl / (1 + c)
        cs = [fl / (fl - (u - a)) - 1 if fl > u - a else float("inf") for a, (u, fl, *_) in zip(b0, worst["long"])]
        c = statistics.median(cs)
        print(f"{name}: {n} gradients; backward alone {statistics.median(b0) * 1e3:.1f} ms; c = {c:.3f} (under one 256 MiB all-reduce)")
        for k in ("spaced", "chained", "ddp"):
            extra = [((u - fl) + fl / (1 + c) - a) / n for a, (u, fl, *_) in zip(b0, worst[k])]
            print(
                f"  {k:8s}: backward {statistics.median(w[0] for w in worst[k]) * 1e3:.1f} ms, "
                f"a call in flight {statistics.median(w[1] for w in worst[k]) * 1e3:.1f} ms of it, last call ended at "
                f"{statistics.median(w[2] for w in worst[k]) * 1e3:.1f} ms; compute beyond the rate model: "
                f"{statistics.median(extra) * 1e6:+.0f} us per call [{min(extra) * 1e6:+.0f}, {max(extra) * 1e6:+.0f}] over {rounds} rounds"
            )
        one = statistics.median(max(g["one call"][i][0] for g in everyone) for i in range(rounds))
        chain = statistics.median(max(g["one call"][i][1] for g in everyone) for i in range(rounds))
        under = statistics.median(w[2] / n for w in worst["chained"])
        print(f"  a 16 KiB call alone {one * 1e3:.2f} ms; per call in a chain alone {chain * 1e3:.3f} ms, "
              f"under a backward pass {under * 1e3:.3f} ms (factor {under / chain:.2f})")
        # the simulator on the spaced pass, every input from this run: the alone pass's ready times
        # as the profile, one 16 KiB bucket per gradient, T = the chain's per-call time alone, the
        # chain's factor under compute, c; gloo's two threads sharing the link
        from commsched.cost.models import Table
        from commsched.sim.events import simulate_run
        from commsched.sim.semantics import Semantics
        from commsched.types import ModelProfile, TensorSpec

        ready0 = [statistics.median(w[3][i] for w in worst["alone"]) for i in range(n)]
        work = [ready0[0]] + [max(0.0, b - a) for a, b in zip(ready0, ready0[1:])]
        prof = ModelProfile(name, batch, "cpu", "measured", 1e-9, tuple(TensorSpec(f"t{i}", SMALL, w) for i, w in enumerate(work)))
        for label, t_call, factor in (("chain per call", chain, under / chain), ("one call alone", one, 1.0)):
            sem = Semantics("gloo", 2, 0.0, c, 0.0, 0.0, None, ((SMALL, factor),))
            tl = simulate_run(prof, tuple(range(1, n + 1)), Table((SMALL, 2 * SMALL), (t_call, t_call)), sem)
            print(f"  simulated spaced pass (T = {label} {t_call * 1e3:.3f} ms, factor {factor:.2f}): backward "
                  f"{(tl.compute_s - 1e-9) * 1e3:.1f} ms, last call ends {(tl.iteration_s - 1e-9) * 1e3:.1f} ms")
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
