"""Ending a process group without the teardown race.

When one rank destroys its process group (and rank 0 its TCPStore server) while another is still
tearing down, the late rank can abort with "terminate called without an active exception"; it was
seen here in about one run in ten of two-rank gloo jobs. A barrier first lets every rank arrive
before any starts tearing down. After an error the barrier is skipped: the peers may be gone. On
gloo the barrier is ``monitored_barrier`` with ``timeout_s``, so a peer that never arrives is an
error naming it, not a wait of the process group's whole timeout (30 minutes by default); other
backends use the plain barrier, bounded by the process group's timeout.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist


def end_process_group(clean: bool, timeout_s: float = 120.0) -> None:
    if not dist.is_initialized():
        return
    try:
        if clean:
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
            else:
                dist.barrier()
    finally:
        dist.destroy_process_group()


def torchrun_backend() -> str:
    """NCCL when this process sees a CUDA device, else gloo; with NCCL the rank's device is set to
    ``LOCAL_RANK`` (torchrun's local rank), so that each rank of a node has a GPU of its own."""
    if not torch.cuda.is_available():
        return "gloo"
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return "nccl"


@contextlib.contextmanager
def process_group(backend: str) -> Iterator[None]:
    """The default process group from torchrun's environment for the ``with`` body, then ended by
    :func:`end_process_group`: cleanly (every rank arrives first) when the body returned, at once
    when it raised."""
    dist.init_process_group(backend=backend)
    clean = False
    try:
        yield
        clean = True
    finally:
        end_process_group(clean)
