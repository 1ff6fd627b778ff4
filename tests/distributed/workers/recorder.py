"""StepRecorder on stock DDP: records that agree with what DDP did, attached before or after the
first step, removed cleanly, and a DDP with a comm hook refused."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.errors import CommschedError
from commsched.runtime.lifecycle import end_process_group
from commsched.runtime.record import StepRecorder


def step(ddp: DDP, rank: int, i: int) -> None:
    x, y = common.batch(rank, i)
    ddp.zero_grad(set_to_none=True)
    nn.CrossEntropyLoss()(ddp(x), y).backward()


def consistent(ddp: DDP, rec: StepRecorder) -> list[str]:
    """What a record says against what the model is: every problem found, as text."""
    sizes = {n: p.numel() * p.element_size() for n, p in ddp.module.named_parameters()}
    problems = []
    for k, r in enumerate(rec.records):
        ready = dict(zip(r.tensor_names, r.ready_s))
        if len(r.bucket_tensors) != len(r.bucket_bytes) or not r.bucket_bytes:
            problems.append(f"step {k}: {len(r.bucket_bytes)} buckets, {len(r.bucket_tensors)} layouts")
        for j, (names, b, s, e) in enumerate(zip(r.bucket_tensors, r.bucket_bytes, r.bucket_start_s, r.bucket_end_s)):
            if sum(sizes[n] for n in names) != b:
                problems.append(f"step {k} bucket {j}: {b} bytes, its tensors {sum(sizes[n] for n in names)}")
            if not max(ready[n] for n in names) <= s <= e <= r.step_end_s:
                problems.append(f"step {k} bucket {j}: launch {s} before its last gradient or after its end {e}")
        if not 0 < r.forward_end_s <= min(r.ready_s):
            problems.append(f"step {k}: forward ends at {r.forward_end_s}, first gradient at {min(r.ready_s)}")
    return problems


def allreduce_hook(state, bucket):
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def main() -> None:
    rank, _ = common.init()
    torch.manual_seed(0)
    out: dict = {"rank": rank}

    # attached before the first step, on small buckets (several per step)
    ddp = DDP(common.Net(), bucket_cap_mb=0.01)
    rec = StepRecorder(ddp)
    for i in range(4):
        step(ddp, rank, i)
    out["before"] = {
        "steps": len(rec.records),
        "buckets": [len(r.bucket_bytes) for r in rec.records],
        "problems": consistent(ddp, rec),
        "layout": [list(b) for b in rec.records[-1].bucket_tensors],
    }
    out["own_s"] = rec.own_s
    rec.pause()
    step(ddp, rank, 10)  # not recorded
    rec.resume()
    step(ddp, rank, 11)
    out["paused"] = {"steps": len(rec.records), "problems": consistent(ddp, rec)}
    try:
        StepRecorder(ddp)
        out["second"] = "accepted"
    except CommschedError as e:
        out["second"] = str(e)
    rec.remove()
    step(ddp, rank, 4)
    out["after_remove"] = len(rec.records)
    try:
        rec.resume()
        out["resumed_after_remove"] = "accepted"
    except CommschedError as e:
        out["resumed_after_remove"] = str(e)

    # attached after two steps (DDP has rebuilt its buckets): the same buckets, recorded
    ddp2 = DDP(common.Net(), bucket_cap_mb=0.01)
    step(ddp2, rank, 0)
    step(ddp2, rank, 1)
    rec2 = StepRecorder(ddp2)
    step(ddp2, rank, 2)
    with ddp2.no_sync():  # does not reduce: not recorded
        step(ddp2, rank, 3)
    step(ddp2, rank, 4)
    out["late"] = {"steps": len(rec2.records), "problems": consistent(ddp2, rec2), "layout": [list(b) for b in rec2.records[-1].bucket_tensors]}

    ddp3 = DDP(common.Net())
    ddp3.register_comm_hook(None, allreduce_hook)
    try:
        StepRecorder(ddp3)
        out["hooked"] = "accepted"
    except CommschedError as e:
        out["hooked"] = str(e)
    common.emit(out)
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
