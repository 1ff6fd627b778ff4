"""bench_chains and the runtime's thread count on two gloo ranks: every rank prints what it got."""

from __future__ import annotations

import common
from commsched.runtime.lifecycle import end_process_group


def main() -> None:
    from commsched.runtime.validate import bench_chains, chain_length, runtime_threads

    import warnings

    common.init()
    samples = bench_chains((4096, 4, 64 << 20, 64), repeats=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = runtime_threads()  # read from the group's options, not the fallback (which warns)
    common.emit({**samples.to_json(), "threads": threads, "fallback": [str(w.message) for w in caught],
                 "chains": [chain_length(s) for s in samples.sizes_bytes]})
    end_process_group(clean=True)


if __name__ == "__main__":
    main()
