"""commsched.DataParallel where things go wrong or run unusually; each case compared with stock DDP.

- failed_backward: a backward raises part-way at step 3 (after some buckets were launched); the
  caller catches it and trains on. Parameters must equal DDP trained on the same batches without
  step 3 (DDP itself refuses to go on after a failed backward, so the reference skips the step).
- inline_futures: every all-reduce's future is already complete when ``then`` is called, so its
  callback runs inline; when 1,198 one-tensor buckets of unused parameters become ready at once at
  the end of backward (serialize mode), a recursive launch would overflow the stack. A failing future must surface as CommschedError from that backward, and the
  next step must train normally.
- kept_grad: a gradient the caller keeps is not changed by the next step, and
  ``zero_grad(set_to_none=False)`` matches DDP.
"""

from __future__ import annotations

import sys
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from commsched.errors import CommschedError
from commsched.runtime.data_parallel import DataParallel, trainable_parameters
from commsched.runtime.lifecycle import end_process_group
from commsched.types import Bucket, Plan

CASE = sys.argv[1] if len(sys.argv) > 1 else ""


def one_tensor_per_bucket(model: nn.Module) -> Plan:
    """Reverse registration order, one tensor per bucket: the most buckets a plan can have."""
    params = trainable_parameters(model)
    names = list(params)[::-1]
    buckets = tuple(Bucket(tensors=(n,), bytes=params[n].numel() * params[n].element_size()) for n in names)
    return Plan(strategy="one-per-bucket", model="test", buckets=buckets)


class Failing(nn.Module):
    """common.Net whose backward can be made to raise between fc2 and fc1."""

    def __init__(self) -> None:
        super().__init__()
        self.net = common.Net()

    def forward(self, x, fail: bool = False):
        n = self.net
        h = torch.relu(n.bn(n.conv(x)))
        h = n.fc1(h.flatten(1))
        if fail:
            def boom(_grad):
                raise RuntimeError("injected backward failure")
            h.register_hook(boom)
        return n.fc2(torch.relu(h))


def failed_backward(rank: int) -> dict:
    def make():
        torch.manual_seed(0)
        return Failing()

    ref = make()
    ddp = DDP(ref)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(8):
        if step == 3:
            continue
        opt.zero_grad(set_to_none=True)
        x, y = common.batch(rank, step)
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    out = {}
    for serialize in (True, False):
        model = make()
        dp = DataParallel(model, one_tensor_per_bucket(model), serialize=serialize, timeout_s=30)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        failed_with, launched_in_failed = None, None
        for step in range(8):
            opt.zero_grad(set_to_none=True)
            x, y = common.batch(rank, step)
            try:
                nn.functional.cross_entropy(dp(x, fail=step == 3), y).backward()
            except RuntimeError as e:
                failed_with = str(e).splitlines()[0]
                launched_in_failed = dp._next_launch
                continue
            opt.step()
        out[f"serialize={serialize}"] = {
            "failed_with": failed_with,
            "launched_in_failed": launched_in_failed,
            "buckets": len(dp.plan.buckets),
            "max_rel_diff": common.max_rel_diff(model, ref),
        }
    return out


class DoneWork:
    """A finished all-reduce: its future is complete before anyone calls ``then`` on it."""

    def __init__(self, tensor: torch.Tensor, error: str | None) -> None:
        self.future = torch.futures.Future()
        if error is None:
            self.future.set_result([tensor])
        else:
            self.future.set_exception(RuntimeError(error))

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self):
        return self.future


class Deep(nn.Module):
    """600 Linear layers (1,200 tensors); ``depth`` uses only the first ones."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(600))

    def forward(self, x, depth: int = 600):
        for layer in self.layers[:depth]:
            x = layer(x)
        return x


def inline_futures(rank: int) -> dict:
    def make():
        torch.manual_seed(0)
        return Deep()

    depth = {0: 600, 1: 600, 2: 1, 3: 600}  # step 2: 1,198 unused tensors all become ready at the end

    def batch(step):
        g = torch.Generator().manual_seed(100 * step + rank)
        return torch.randn(3, 4, generator=g)

    ref = make()
    ddp = DDP(ref, find_unused_parameters=True)
    opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for step in (0, 2, 3):  # step 1 fails below and is not taken
        opt.zero_grad(set_to_none=True)
        ddp(batch(step), depth[step]).square().mean().backward()
        opt.step()

    real = dist.all_reduce
    fail = {"on": False}

    def blocking_all_reduce(tensor, *args, **kwargs):
        kwargs.pop("async_op", None)
        real(tensor, *args, **kwargs)  # both ranks reduce for real, then hand back a finished work
        return DoneWork(tensor, "injected all-reduce failure" if fail["on"] else None)

    model = make()
    dp = DataParallel(model, one_tensor_per_bucket(model), serialize=True, timeout_s=30, find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dist.all_reduce = blocking_all_reduce
    error = None
    try:
        for step in range(4):
            opt.zero_grad(set_to_none=True)
            fail["on"] = step == 1
            try:
                dp(batch(step), depth[step]).square().mean().backward()
            except CommschedError as e:
                error = str(e)
                continue
            opt.step()
    finally:
        dist.all_reduce = real
    return {"buckets": len(dp.plan.buckets), "error": error, "max_rel_diff": common.max_rel_diff(model, ref)}


def kept_grad(rank: int) -> dict:
    def make():
        torch.manual_seed(0)
        return common.Net()

    def train(wrapped: nn.Module, m: nn.Module) -> None:
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        for step in range(6):
            opt.zero_grad(set_to_none=False)  # gradients stay allocated and are accumulated into
            x, y = common.batch(rank, step)
            nn.functional.cross_entropy(wrapped(x), y).backward()
            opt.step()

    ref, model = make(), make()
    train(DDP(ref), ref)
    dp = DataParallel(model, one_tensor_per_bucket(model), timeout_s=30)
    train(dp, model)
    max_rel_diff = common.max_rel_diff(model, ref)

    kept = model.fc2.weight.grad  # e.g. kept for logging
    snapshot = kept.clone()
    model.zero_grad(set_to_none=True)
    x, y = common.batch(rank, 99)
    nn.functional.cross_entropy(dp(x), y).backward()
    return {
        "max_rel_diff": max_rel_diff,
        "kept_changed": not torch.equal(kept, snapshot),
        "fresh_grad_tensor": model.fc2.weight.grad.data_ptr() != kept.data_ptr(),
    }


class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("injected backward failure")


class Three(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, fail: bool = False):
        h = self.l1(x)
        if fail:
            h = Boom.apply(h)
        return self.l3(torch.relu(self.l2(torch.relu(h))))


def collective_after_failure(rank: int) -> dict:
    """After a failed backward, drain() then a collective of the caller's own: it must pair with the
    same collective on the other rank, not with a late bucket of the failed step (rank 1 is late)."""
    import time

    out = {}
    for serialize in (True, False):
        torch.manual_seed(0)
        m = Three()
        dp = DataParallel(m, one_tensor_per_bucket(m), serialize=serialize, timeout_s=30)
        x = torch.randn(2, 4)
        loss = dp(x, fail=True).sum()
        if rank == 1:
            time.sleep(0.5)
        try:
            loss.backward()
        except RuntimeError:
            dp.drain()
        if rank == 1:
            time.sleep(0.3)
        flag = torch.full((4,), float(rank + 1))  # the size of a bias bucket, so a wrong pairing is silent
        dist.all_reduce(flag)
        dp(x).sum().backward()  # and training goes on
        out[f"serialize={serialize}"] = flag.tolist()
    return out


def unsupported(rank: int) -> dict:
    """Reentrant checkpointing and a second backward over one forward raise CommschedError (not a
    silently wrong gradient); non-reentrant checkpointing gives the averaged gradient."""
    from torch.utils.checkpoint import checkpoint

    class Ckpt(nn.Module):
        def __init__(self, reentrant: bool) -> None:
            super().__init__()
            self.a, self.b, self.reentrant = nn.Linear(4, 4), nn.Linear(4, 1), reentrant

        def forward(self, x):
            return checkpoint(self.b, torch.relu(self.a(x)), use_reentrant=self.reentrant)

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))
    out = {}
    for find_unused in (True, False):
        torch.manual_seed(0)
        m = Ckpt(reentrant=True)
        dp = DataParallel(m, one_tensor_per_bucket(m), find_unused_parameters=find_unused, timeout_s=30)
        try:
            dp(x).sum().backward()
            out[f"reentrant find_unused={find_unused}"] = "no error"
        except CommschedError as e:
            out[f"reentrant find_unused={find_unused}"] = str(e)
            dp.drain()  # before the next collectives (DDP's set-up below), as documented
    # the reference is the local gradient averaged by hand: stock DDP in torch 2.14 leaves the
    # gradients of this model unreduced (seen here: each rank kept its local gradient)
    torch.manual_seed(0)
    ref = Ckpt(reentrant=False)
    ref(x).sum().backward()
    for p in ref.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    torch.manual_seed(0)
    m = Ckpt(reentrant=False)
    DataParallel(m, one_tensor_per_bucket(m), timeout_s=30)(x).sum().backward()
    out["non-reentrant grad diff"] = max((p.grad - q.grad).abs().max().item() for p, q in zip(m.parameters(), ref.parameters()))

    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.h1, self.h2 = nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)

        def forward(self, x):
            h = self.body(x)
            return self.h1(h), self.h2(h)

    torch.manual_seed(0)
    m = TwoHeads()
    dp = DataParallel(m, one_tensor_per_bucket(m), find_unused_parameters=True, timeout_s=30)
    a, b = dp(x)
    a.sum().backward(retain_graph=True)
    try:
        b.sum().backward()
        out["second backward"] = "no error"
    except CommschedError as e:
        out["second backward"] = str(e)
    dp.drain()
    return out


def ddp_rules(rank: int) -> dict:
    """Buffers synced before an evaluation forward, and a no_sync forward between a synchronised
    forward and its backward, exactly as stock DDP does them."""

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))

    def run(wrap):
        m = make()
        w = wrap(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for step in range(5):  # the last step has no diagnostic pass: the eval forward syncs buffers
            g = torch.Generator().manual_seed(10 * step + rank)
            x = torch.randn(8, 4, generator=g) * (1 + 5 * rank)  # ranks see different data
            opt.zero_grad(set_to_none=True)
            loss = w(x).sum()
            if step % 2:
                with w.no_sync():
                    w(x * 2).sum()  # a diagnostic pass, never backpropagated
            loss.backward()
            opt.step()
        w.eval()
        with torch.no_grad():
            return w(torch.ones(2, 4)), m

    out_ref, ref = run(lambda m: DDP(m))
    out_dp, m = run(lambda m: DataParallel(m, one_tensor_per_bucket(m), timeout_s=30))
    return {
        "eval_out_diff": (out_ref - out_dp).abs().max().item(),
        "max_rel_diff": common.max_rel_diff(m, ref),
        "eval_out": out_dp.flatten().tolist(),
    }


def main() -> None:
    rank, _ = common.init()
    try:
        cases = {
            "failed_backward": failed_backward,
            "inline_futures": inline_futures,
            "kept_grad": kept_grad,
            "collective_after_failure": collective_after_failure,
            "unsupported": unsupported,
            "ddp_rules": ddp_rules,
        }
        doc = cases[CASE](rank)
    except Exception:  # noqa: BLE001 - reported, then the test fails on it
        common.emit({"rank": rank, "crash": traceback.format_exc()})
        end_process_group(clean=False)
        return
    common.emit({"rank": rank, **doc})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
