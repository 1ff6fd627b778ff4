"""Train the same model 20 SGD steps with stock DDP and with commsched.DataParallel; report the
largest relative parameter difference and the all-reduces commsched really issued."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.runtime.lifecycle import end_process_group

MODE = sys.argv[1]  # plain | no_sync | no_sync_unused | forward_in_no_sync | frozen | unused | bf16 | fp16
STEPS = 20
STRATEGIES = ["wfbp", "synceasgd", "ddp", "ddp-small", "horovod", "horovod-legacy", "mgwfbp", "adafusion", "optimal"]


def make(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = common.Net(frozen=MODE == "frozen", branch=MODE in ("unused", "no_sync_unused"))
    if MODE == "bf16":
        m = m.to(torch.bfloat16)
    if MODE == "fp16":
        m = m.to(torch.float16)
    return m


def train(wrapped: nn.Module, params, rank: int) -> None:
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    dtype = next(wrapped.parameters()).dtype
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        x, y = common.batch(rank, step)
        x = x.to(dtype)
        if MODE == "no_sync":
            with wrapped.no_sync():
                loss_fn(wrapped(x).float(), y).backward()
            x2, y2 = common.batch(rank, step + 100)
            loss_fn(wrapped(x2).float(), y2).backward()
        elif MODE == "no_sync_unused":
            # the extra branch is used only in the no_sync micro-batch (rank 0 at even steps, every
            # rank at steps divisible by 3): its accumulated gradient must still be reduced
            use = (rank == 0 and step % 2 == 0) or step % 3 == 0
            with wrapped.no_sync():
                loss_fn(wrapped(x, use_extra=use).float(), y).backward()
            x2, y2 = common.batch(rank, step + 100)
            loss_fn(wrapped(x2).float(), y2).backward()
        elif MODE == "forward_in_no_sync":
            # the forward decides, as with DDP: this backward runs outside no_sync but does not reduce
            with wrapped.no_sync():
                loss = loss_fn(wrapped(x).float(), y)
            loss.backward()
            x2, y2 = common.batch(rank, step + 100)
            loss_fn(wrapped(x2).float(), y2).backward()
        elif MODE == "unused":
            # the extra branch is used on rank 0 at even steps only: locally and globally unused steps
            use = rank == 0 and step % 2 == 0
            loss_fn(wrapped(x, use_extra=use).float(), y).backward()
        else:
            loss_fn(wrapped(x).float(), y).backward()
        opt.step()


def main() -> None:
    from commsched.runtime.data_parallel import DataParallel

    rank, world = common.init()
    plans = common.plans_for(make(), STRATEGIES)
    ref = make()
    unused = MODE in ("unused", "no_sync_unused")
    ddp = DDP(ref, find_unused_parameters=unused)
    train(ddp, [p for p in ref.parameters() if p.requires_grad], rank)

    out = {}
    for name, plan in plans.items():
        model = make()
        # record=True: the recorder sits between DDP's reducer and its process group, so this also
        # checks that recording leaves the gradients bit for bit as stock DDP makes them
        dp = DataParallel(model, plan, find_unused_parameters=unused, record=True)
        train(dp, [p for p in model.parameters() if p.requires_grad], rank)
        layouts = [[sorted(b) for b in r.bucket_tensors] for r in dp.records]
        out[name] = {
            "max_rel_diff": common.max_rel_diff(model, ref),
            "bit_identical": all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters())),
            "layouts_after_first": layouts[1:],
            "promised": [sorted(b) for b in dp.expression.buckets],
            "exact": dp.expression.exact,
            "plan": [sorted(b.tensors) for b in plan.buckets],
            "recorded_steps": len(dp.records),
        }
    common.emit({"rank": rank, "results": out, "frozen_in_plan": any("conv" in t for p in plans.values() for b in p.buckets for t in b.tensors)})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
