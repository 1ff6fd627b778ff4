"""One training job per variant, N steps each, on every rank (run under torchrun or commsched emulate
by ``benchmarks/tune_emulated.py``): stock DDP's defaults, ``commsched.DataParallel(tune=True)``, and
stock DDP with ``bucket_cap_mb`` in {1, 5, 10, 25, 50, 100} (the hand sweep); for the cost of tuning itself also ``untuned`` (the wrapper, not tuning) and
``recorded`` (stock DDP recorded over steps 2-10, as tuning records it); with ``--compile``,
``split1`` (stock DDP's buckets, the compiled graph split at 1 MiB). Each variant trains a
fresh copy of the model (seeded: the same weights) with SGD on the factory's inputs; the variants run
in a random order per repeat (the same on every rank). Rank 0 writes the totals, every step's time
(forward to forward) and the tuner's report as JSON to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `benchmarks.custom_models` importable

CAPS = (1, 5, 10, 25, 50, 100)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="zoo name or package.module:factory")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--variants", default="stock,tuned," + ",".join(f"cap{c}" for c in CAPS))
    ap.add_argument("--find-unused", action="store_true")
    ap.add_argument("--tune-strategy", default="optimal", help="the strategy tuning tries (wfbp: a plan that loses, for the cost of a rejection)")
    ap.add_argument("--tune-min-gain", type=float, default=None, help="TuneConfig.min_gain (0: try the plan even where predicted slower)")
    ap.add_argument("--compile", default=None, metavar="BACKEND", help="torch.compile every variant's DDP with this backend (inductor, aot_eager)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from commsched.models.inputs import call_with
    from commsched.models.source import build
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.lifecycle import process_group
    from commsched.runtime.tune import TuneConfig

    variants = args.variants.split(",")
    with process_group("gloo"):
        rank = dist.get_rank()
        totals: dict[str, list[float]] = {v: [] for v in variants}
        steps_s: dict[str, list[list[float]]] = {v: [] for v in variants}
        tuning: list[dict] = []
        for rep in range(args.repeats):
            for v in random.Random(rep).sample(variants, len(variants)):
                built = build(args.model, args.batch_size, args.image_size)
                model = built.model
                if v == "stock":
                    ddp = DDP(model, find_unused_parameters=args.find_unused)
                elif v == "tuned":
                    cfg = TuneConfig(strategy=args.tune_strategy, cache_dir="", total_steps=args.steps, log=rank == 0)
                    if args.tune_min_gain is not None:
                        cfg = dataclasses.replace(cfg, min_gain=args.tune_min_gain)
                    ddp = DataParallel(model, tune=cfg, find_unused_parameters=args.find_unused)
                elif v == "untuned":  # the wrapper alone: a job too short to tune, stock DDP throughout
                    cfg = TuneConfig(cache_dir="", total_steps=1, log=False)
                    ddp = DataParallel(model, tune=cfg, find_unused_parameters=args.find_unused)
                elif v == "recorded":  # stock DDP with a StepRecorder over steps 2-10, then removed (what tuning records)
                    ddp = DDP(model, find_unused_parameters=args.find_unused)
                elif v == "split1":  # stock DDP's buckets; under --compile, Dynamo's graph split at 1 MiB (it reads bucket_bytes_cap)
                    ddp = DDP(model, find_unused_parameters=args.find_unused)
                    ddp.bucket_bytes_cap = 1 << 20
                else:
                    ddp = DDP(model, bucket_cap_mb=float(v[3:]), find_unused_parameters=args.find_unused)
                recorder = None
                net = ddp
                if args.compile:  # each variant compiles afresh: Dynamo's cache would carry the last one's graphs
                    from torch._dynamo import reset as reset_dynamo

                    reset_dynamo()
                    net = torch.compile(ddp, backend=args.compile)
                opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
                stamps = []
                dist.barrier()
                t0 = time.perf_counter()
                for step in range(args.steps):
                    if v == "recorded" and step == 2:
                        from commsched.runtime.record import StepRecorder

                        recorder = StepRecorder(ddp)
                    if recorder is not None and step == 11:
                        recorder.remove()
                        recorder = None
                    stamps.append(time.perf_counter())
                    opt.zero_grad(set_to_none=True)
                    built.loss_fn(call_with(net, built.inputs)).backward()
                    opt.step()
                dist.barrier()
                total = time.perf_counter() - t0
                stamps.append(time.perf_counter())
                totals[v].append(total)
                steps_s[v].append([b - a for a, b in zip(stamps, stamps[1:])])
                if v == "tuned":
                    tuning.append(ddp.tuning)
                if rank == 0:
                    print(f"repeat {rep} {v}: {total:.2f} s", file=sys.stderr, flush=True)
                del ddp, net, model, built, opt
        if rank == 0:
            doc = {"model": args.model, "batch_size": args.batch_size, "image_size": args.image_size, "steps": args.steps, "compile": args.compile,
                   "world_size": dist.get_world_size(), "totals_s": totals, "steps_s": steps_s, "tuning": tuning}
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
