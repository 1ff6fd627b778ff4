"""A measured step as a Timeline, and its breakdown into computation, communication and overlap."""

from __future__ import annotations

import math

import pytest

from commsched.runtime.record import StepRecord


def test_timeline_and_breakdown_of_a_hand_made_step():
    # forward 0-1 s, gradients ready at 1.5, 2 and (unused) nan; buckets 1.5-2.5 and 2.5-3.5
    rec = StepRecord(
        forward_end_s=1.0,
        ready_s=(1.5, 2.0, math.nan),
        bucket_start_s=(1.5, 2.5),
        bucket_end_s=(2.5, 3.5),
        bucket_bytes=(100, 200),
        step_end_s=3.6,
    )
    tl = rec.timeline()
    assert tl.iteration_s == 3.5 and tl.compute_s == 2.0 and tl.comm_s == 2.0
    assert tl.non_overlapped_comm_s == 1.5
    assert [(s.start_s, s.end_s, s.bytes) for s in tl.allreduces] == [(1.5, 2.5, 100), (2.5, 3.5, 200)]
    b = rec.breakdown()
    assert b["overlap_s"] == pytest.approx(0.5)  # 1.5-2.0: compute and all-reduce together
    assert b["computation_only_s"] == pytest.approx(1.5)  # 0-1.5
    assert b["communication_only_s"] == pytest.approx(1.5)  # 2.0-3.5
