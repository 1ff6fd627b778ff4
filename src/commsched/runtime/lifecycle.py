"""Ending a process group without the teardown race.

When one rank destroys its process group (and rank 0 its TCPStore server) while another is still
tearing down, the late rank can abort with "terminate called without an active exception"; it was
seen here in about one run in ten of two-rank gloo jobs. A barrier first lets every rank arrive
before any starts tearing down. After an error the barrier is skipped: the peers may be gone.
"""

from __future__ import annotations

import torch.distributed as dist


def end_process_group(clean: bool) -> None:
    if not dist.is_initialized():
        return
    if clean:
        dist.barrier()
    dist.destroy_process_group()
