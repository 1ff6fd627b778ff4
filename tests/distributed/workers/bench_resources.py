"""One rank of a small ``measure_resources`` run (issue 31): two block counts, two sizes, a
torch-only model (no torchvision), ranks placed on GPUs by LOCAL_RANK mod the GPU count. The
argument is the mechanism (``groups`` or ``tuner``). Prints the samples as its RESULT."""

from __future__ import annotations

import os
import sys

import torch
from torch import nn

import common


def small_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 32 * 32, 10),
    )


def main() -> None:
    from commsched.runtime.gpu_bench import measure_resources

    samples = measure_resources(
        [1, 2], int(os.environ["NCCL_NTHREADS"]), [4096, 1 << 20], 2, sys.argv[1],
        model_builder=small_model, input_shape=(16, 3, 32, 32),
    )
    doc = samples.to_json()
    doc["rank"] = int(os.environ["RANK"])
    common.emit(doc)


if __name__ == "__main__":
    main()
