"""How close a bucket cap's training step comes to the fastest step any bucketing could give (issue
33, item 5).

No bucketing makes a data-parallel step shorter than its forward pass, then the longer of its
backward pass and the all-reduce of every gradient byte (which can start only once backward has
begun, and can go no faster than the link alone), then the optimizer step:

    floor = forward + max(backward, all-reduce of all gradients) + optimizer,

each part measured alone. This times, interleaved each round (every rank in lockstep after a
barrier, the slowest rank's times):

- "stock": a training step of stock DDP with its defaults;
- "capN": a training step of stock DDP with ``bucket_cap_mb=N`` (``--cap``, default 1);
- "capNview": the same with ``gradient_as_bucket_view=True`` (no copies into and out of the buckets);
- "local": the same model's forward, backward and optimizer step, no DDP (no communication);
- "flat": one all-reduce of all gradient bytes (one flat tensor per dtype), nothing else running;
- "chunks": the same bytes as all-reduces of N MiB each, launched back to back, then waited.

and prints each median [min, max] and the cap's step over the floor built from the medians of
"local" and the faster of "flat" and "chunks". A cap within x% of the floor leaves no plan more than
x% to gain over it, whatever its buckets.

Run (as root, from the repo):
    .venv/bin/commsched emulate --nodes 2 --rate-mbit 500 -- benchmarks/investigations/floor.py \
        --model bert_small --batch-size 8 --rounds 20
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _rounds
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # benchmarks.custom_models

from _rounds import interleaved

PHASES = ("forward", "backward", "optimizer", "step")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="zoo name or package.module:factory")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--cap", type=float, default=1.0, help="bucket_cap_mb of the cap timed against the floor")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--only-caps", action="store_true", help="time the cap with and without bucket views only (no floor)")
    args = ap.parse_args()

    from commsched.models.inputs import call_with
    from commsched.models.source import build
    from commsched.runtime.lifecycle import process_group

    cap_kind = f"cap{args.cap:g}"
    view_kind = cap_kind + "view"
    kinds = [cap_kind, view_kind] if args.only_caps else ["stock", cap_kind, view_kind, "local", "flat", "chunks"]
    with process_group("gloo"):
        torch.manual_seed(0)
        built = build(args.model, args.batch_size, args.image_size)
        trainers = {}
        for kind, kwargs in (("stock", {}), (cap_kind, {"bucket_cap_mb": args.cap}),
                             (view_kind, {"bucket_cap_mb": args.cap, "gradient_as_bucket_view": True}), ("local", None)):
            m = copy.deepcopy(built.model)
            net = DDP(m, **kwargs) if kwargs is not None else m
            stamp = {"forward": 0.0}
            net.register_forward_hook(lambda *_, s=stamp: s.__setitem__("forward", time.perf_counter()))
            opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
            trainers[kind] = (net, opt, stamp)
        grads = [p for p in built.model.parameters() if p.requires_grad]
        by_dtype: dict[torch.dtype, int] = {}
        for p in grads:
            by_dtype[p.dtype] = by_dtype.get(p.dtype, 0) + p.numel()
        flats = [torch.ones(n, dtype=dt) for dt, n in by_dtype.items()]
        chunk_elems = {dt: max(1, int(args.cap * 2**20) // torch.empty((), dtype=dt).element_size()) for dt in by_dtype}
        chunks = [c for f in flats for c in f.split(chunk_elems[f.dtype])]
        total_bytes = sum(f.numel() * f.element_size() for f in flats)

        def timed(kind: str) -> tuple:
            dist.barrier()
            t0 = time.perf_counter()
            if kind in ("flat", "chunks"):
                works = [dist.all_reduce(t, async_op=True) for t in (flats if kind == "flat" else chunks)]
                for w in works:
                    w.wait()
                t = time.perf_counter() - t0
                return 0.0, t, 0.0, t
            net, opt, stamp = trainers[kind]
            opt.zero_grad(set_to_none=True)
            built.loss_fn(call_with(net, built.inputs)).backward()
            t1 = time.perf_counter()
            opt.step()
            t2 = time.perf_counter()
            return stamp["forward"] - t0, t1 - stamp["forward"], t2 - t1, t2 - t0

        for k in kinds:  # DDP rebuilds its buckets in ready order after the first step
            timed(k)
        everyone = interleaved(timed, kinds, args.rounds)
        if dist.get_rank() == 0:
            med: dict[str, list[float]] = {}
            print(f"{args.model} batch {args.batch_size}: {total_bytes / 2**20:.1f} MiB of gradients, {dist.get_world_size()} ranks; "
                  f"medians over {args.rounds} rounds of the slowest rank [min, max], ms")
            print(f"{'kind':8s}" + "".join(f"{p:>26s}" for p in PHASES))
            for k in kinds:
                per_round = [tuple(max(r[k][i][j] for r in everyone) for j in range(4)) for i in range(args.rounds)]
                cells, med[k] = [], []
                for j in range(4):
                    v = [x[j] * 1e3 for x in per_round]
                    med[k].append(statistics.median(v))
                    cells.append(f"{statistics.median(v):8.1f} [{min(v):6.1f}, {max(v):6.1f}]")
                print(f"{k:8s}" + "".join(f"{c:>26s}" for c in cells))
            print(f"{view_kind} over {cap_kind}: {med[cap_kind][3] / med[view_kind][3]:.3f}x")
            if args.only_caps:
                return
            fwd, bwd, optim, _ = med["local"]
            comm = min(med["flat"][3], med["chunks"][3])
            floor = fwd + max(bwd, comm) + optim
            print(f"floor = forward {fwd:.1f} + max(backward {bwd:.1f}, all-reduce {comm:.1f}) + optimizer {optim:.1f} = {floor:.1f} ms")
            print(f"{cap_kind}: {med[cap_kind][3]:.1f} ms, {med[cap_kind][3] / floor:.3f}x the floor; "
                  f"{view_kind}: {med[view_kind][3]:.1f} ms, {med[view_kind][3] / floor:.3f}x; stock: {med['stock'][3]:.1f} ms, {med['stock'][3] / floor:.3f}x; {cap_kind} over stock {med['stock'][3] / med[cap_kind][3]:.3f}x")


if __name__ == "__main__":
    main()
