"""The probe's chain lengths and the cost table's sizes (commsched.calibrate.cost_table, pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from commsched.calibrate.cost_table import (
    LONG_MESSAGE_MAX_BYTES,
    MAX_CHAIN_CALLS,
    MIB,
    chain_bytes_at_most,
    chain_calls,
    probe_sizes,
)

sizes = st.sampled_from(probe_sizes(1 << 30)) | st.integers(1, 1 << 28).map(lambda b: b * 4)


@given(sizes, st.floats(1e-4, 100.0), st.floats(0.0, 10.0))
def test_a_chain_is_a_third_of_the_pass_within_its_bounds(size, backward_s, call_s):
    calls = chain_calls(size, backward_s, call_s)
    assert 1 <= calls <= MAX_CHAIN_CALLS
    assert calls * size <= max(size, LONG_MESSAGE_MAX_BYTES) and calls * size <= chain_bytes_at_most(size)
    # up to 8 MiB the byte bound never acts: the rule as it was before it (a third of the pass, 1 to 32 calls)
    if size <= 8 * MIB:
        assert calls == max(1, min(32, round(backward_s / 3 / max(call_s, 1e-6))))


def test_the_byte_bound_acts_only_on_large_fast_chains():
    # loopback, one rank: 64 MiB all-reduces at memory speed (a millisecond) in a half-second pass
    assert chain_calls(64 * MIB, 0.5, 1e-3) == 4 and chain_calls(8 * MIB, 0.5, 1e-3) == 32
    # an emulated link: a 64 MiB all-reduce outlasts a third of the pass, one call as before
    assert chain_calls(64 * MIB, 0.5, 0.3) == 1
    assert chain_bytes_at_most(64 * MIB) == LONG_MESSAGE_MAX_BYTES and chain_bytes_at_most(16 * 1024) == 32 * 16 * 1024
