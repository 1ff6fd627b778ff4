"""Collectives with a deadline, for set-up and tuning: a rank that died or hangs is a clear error on
the others within the caller's timeout, not the process group's (30 minutes by default)."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from commsched.errors import CommschedError


def wait_until(work, deadline: float, what: str, rank: int, cause: str) -> None:
    left = deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError("no time left before the deadline")
        work.wait(timedelta(seconds=left))
    except Exception as e:  # noqa: BLE001 - a timeout and a closed connection mean the same here
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CommschedError(f"rank {rank}: {what} did not complete before its deadline (timeout_s); {cause} ({type(e).__name__}: {first})") from e


def comm_device(group, module: nn.Module) -> torch.device:
    """The CPU where the group serves CPU tensors, else its CUDA device: read from the group's
    backend config (``cuda:nccl`` for ``nccl`` and for a plain ``init_process_group()`` on a GPU,
    whose ``get_backend`` is ``"undefined"``), not from ``get_backend``."""
    from commsched.runtime.resource_hook import device_backend

    if device_backend(dist.get_backend_config(group), "cpu") is None:
        p = next(iter(module.parameters()), None)
        return p.device if p is not None and p.is_cuda else torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_bytes(payload: bytes | None, group, device, rank: int, timeout_s: float, what: str) -> bytes:
    """Rank 0's ``payload`` on every rank (a length, then the bytes), each wait at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    src = dist.get_global_rank(group, 0) if group is not dist.group.WORLD else 0
    n = torch.tensor([len(payload) if rank == 0 and payload is not None else 0], dtype=torch.int64, device=device)
    wait_until(dist.broadcast(n, src=src, group=group, async_op=True), deadline, what, rank, "a peer rank has probably died")
    size = int(n.item())
    buf = torch.zeros(size, dtype=torch.uint8, device=device)
    if rank == 0 and payload:
        buf.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    if size:
        wait_until(dist.broadcast(buf, src=src, group=group, async_op=True), deadline, what, rank, "a peer rank has probably died")
    return buf.cpu().numpy().tobytes()


def gather_text(text: str, group, device, rank: int, timeout_s: float, what: str) -> list[str]:
    """Every rank's ``text`` (at most 255 bytes), in rank order."""
    raw = text.encode()[:255]
    mine = torch.zeros(256, dtype=torch.uint8)
    mine[0] = len(raw)
    if raw:
        mine[1 : 1 + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    everyone = [torch.empty(256, dtype=torch.uint8, device=device) for _ in range(dist.get_world_size(group))]
    work = dist.all_gather(everyone, mine.to(device), group=group, async_op=True)
    wait_until(work, time.monotonic() + timeout_s, what, rank, "a peer rank has probably died")
    out = []
    for t in everyone:
        b = t.cpu().numpy().tobytes()
        out.append(b[1 : 1 + b[0]].decode(errors="replace"))
    return out
