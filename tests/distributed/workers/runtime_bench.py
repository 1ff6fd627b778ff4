"""bench_runtime_allreduce on two gloo ranks: every rank prints what it got."""

from __future__ import annotations

import common
from commsched.runtime.lifecycle import end_process_group


def main() -> None:
    from commsched.runtime.validate import bench_runtime_allreduce

    common.init()
    samples = bench_runtime_allreduce((4096, 4, 64 << 20, 64), steps=3)
    common.emit(samples.to_json())
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
