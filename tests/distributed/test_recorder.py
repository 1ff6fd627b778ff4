"""StepRecorder on real gloo processes (issue 11, item 2): its records agree with the model and
DDP's buckets, it attaches before or after DDP's rebuild, pauses and resumes, and refuses what it
cannot record."""

from __future__ import annotations

from tests.distributed.launch import results, run_workers


def test_recorder_records_what_ddp_reduces():
    for d in results(run_workers("recorder.py", [])):
        before, late = d["before"], d["late"]
        assert before["steps"] == 4 and not before["problems"], before
        # iteration 0 is one bucket (torch 2.14 without find_unused_parameters); the rebuild splits it
        assert before["buckets"][0] == 1 and before["buckets"][-1] > 1, before
        assert d["paused"] == {"steps": 5, "problems": []}  # the paused step is not recorded, the next one is
        assert d["paused_calls"] == 0
        assert d["after_remove"] == 5  # removed: no more records
        assert "removed" in d["resumed_after_remove"]
        assert late["steps"] == 2 and not late["problems"], late  # the no_sync step is not recorded
        assert late["layout"] == before["layout"]  # attached after the rebuild: the same buckets
        assert 0 < d["own_s"] < 0.5
        assert "already has a StepRecorder" in d["second"]
        assert all("comm hook" in h for h in d["hooked"]), d["hooked"]  # a Python one and a built-in one
        st = d["static_view"]
        assert st["steps"] == 4 and not st["problems"] and st["buckets"][-1] > 1, st
        assert d["alive_after_drop"] == [False, False, False]
