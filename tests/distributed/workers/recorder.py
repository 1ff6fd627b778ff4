"""StepRecorder on stock DDP: records that agree with what DDP did, attached before or after the
first step, removed cleanly, and a DDP with a comm hook refused."""

from __future__ import annotations

import gc
import weakref

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
    group = rec.group
    calls = group.allreduces
    rec.pause()
    step(ddp, rank, 10)  # not recorded, and the reducer's own group is back: nothing passes the recording one
    out["paused_calls"] = group.allreduces - calls
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

    # static graph, gradients as bucket views: the same checks
    ddp4 = DDP(common.Net(), bucket_cap_mb=0.01, static_graph=True, gradient_as_bucket_view=True)
    rec4 = StepRecorder(ddp4)
    for i in range(4):
        step(ddp4, rank, i)
    out["static_view"] = {"steps": len(rec4.records), "buckets": [len(r.bucket_bytes) for r in rec4.records], "problems": consistent(ddp4, rec4)}

    out["hooked"] = []
    for register in (lambda d: d.register_comm_hook(None, allreduce_hook), lambda d: d._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)):
        ddp3 = DDP(common.Net())
        register(ddp3)
        try:
            StepRecorder(ddp3)
            out["hooked"].append("accepted")
        except CommschedError as e:
            out["hooked"].append(str(e))

    # nothing keeps a dropped model alive: the recorder's hooks live on the parameters, and the
    # recorder holds neither them nor the DDP model strongly
    ddp5 = DDP(common.Net())
    rec5 = StepRecorder(ddp5)
    step(ddp5, rank, 0)
    refs = [weakref.ref(x) for x in (ddp5, rec5, next(ddp5.module.parameters()))]
    del ddp5, rec5
    gc.collect()
    out["alive_after_drop"] = [r() is not None for r in refs]
    common.emit(out)
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
