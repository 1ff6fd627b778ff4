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

from datetime import timedelta

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
