"""What a validate run needs against what the machine has (commsched.runtime.validate.memory)."""

from __future__ import annotations

import pytest

from commsched.errors import CommschedError

pytest.importorskip("torch")  # the package's __init__ loads the run

from commsched.calibrate.cost_table import LONG_MESSAGE_MAX_BYTES, MIB  # noqa: E402
from commsched.runtime.validate import memory  # noqa: E402

GIB = 1 << 30


def test_the_estimate_is_the_same_whatever_the_number_of_strategies():
    one = memory.estimate(100 * MIB, 100 * MIB, 50 * MIB, 1)
    nine = memory.estimate(100 * MIB, 100 * MIB, 50 * MIB, 9)
    # one variant's DDP at a time (its turn), beside the fixed copies
    assert one.copies == nine.copies == 7 + 4 and nine.variants == 9
    assert nine.need_bytes == one.need_bytes
    # the weights already held are not counted again; the activations have their margin
    assert one.need_bytes == int((7 + 4 - 1) * 100 * MIB + memory.ACTIVATION_PEAK * 50 * MIB + one.comm_bytes)


def test_the_probe_messages_are_bounded_whatever_the_model():
    small, large = memory.comm_bytes(4096), memory.comm_bytes(10 * GIB)
    assert 2 * LONG_MESSAGE_MAX_BYTES < small < large < 4 * GIB  # two long messages, chains capped


def test_a_run_that_cannot_fit_is_refused_in_one_line_naming_the_numbers():
    est = memory.estimate(230 * MIB, 230 * MIB, int(2.7 * GIB), 6)
    memory.check(est, {"m": (2, 64 * GIB)}, "resnet152", 16)  # fits: nothing said
    with pytest.raises(CommschedError) as e:
        memory.check(est, {"m": (2, 8 * GIB)}, "resnet152", 16)
    msg = str(e.value)
    assert "\n" not in msg and "8.0 GiB available" in msg and "2 ranks" in msg and "10 model copies of 230 MiB" in msg
    assert "resnet152 at batch 16" in msg and "--batch-size" in msg
    # where the model's copies take most of it, a smaller batch would not do
    weights = memory.estimate(GIB, GIB, 5 * MIB, 6)
    with pytest.raises(CommschedError) as e:
        memory.check(weights, {"m": (2, 8 * GIB)}, "big", 16)
    assert "--batch-size" not in str(e.value) and "fewer ranks per machine (the model's copies take most of it)" in str(e.value)


def test_ranks_on_one_machine_share_its_memory():
    # two emulated nodes (network namespaces of one machine: one boot id) and a machine of its own
    machines = memory.machines_of([("a", 10 * GIB), ("a", 9 * GIB), ("b", 30 * GIB), ("c", None)])
    assert machines == {"a": (2, 9 * GIB), "b": (1, 30 * GIB)}
    est = memory.estimate(GIB, GIB, 0, 1)  # 10 GiB + the probe's messages per rank
    with pytest.raises(CommschedError, match="2 ranks"):
        memory.check(est, machines, "m", 1)
    memory.check(est, {"b": machines["b"]}, "m", 1)


def test_this_machine_is_read():
    assert memory.available_bytes() is None or memory.available_bytes() > 0
    assert memory.machine_id()
    now, peak = memory.rss_bytes()
    assert 0 < now <= peak
