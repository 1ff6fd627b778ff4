"""Mismatched plans are an error on every rank, not a hang; a rank that dies or hangs before or while
the model is wrapped is a clear error on the others within the timeout; a rank that dies
mid-training makes the survivor fail (stock DDP's gloo error) instead of hanging."""

from __future__ import annotations

import json

import pytest

from tests.distributed.launch import run_workers

TIMEOUT = 10  # DP_TIMEOUT, the workers' default


def outputs(procs):
    docs = []
    for p in procs:
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        docs.append(json.loads(lines[-1][7:]) if lines else None)
    return docs


@pytest.mark.parametrize(
    "case,needle",
    [
        ("different_plans", "ranks hold different plans"),
        ("plan_does_not_fit", "does not fit the model on rank 1"),
        ("wrong_bytes", "made for other shapes or dtypes"),
    ],
)
def test_plan_mismatch_is_an_error_on_every_rank(case, needle):
    procs = run_workers("safety.py", [case], timeout_s=120)
    docs = outputs(procs)
    for rank, doc in enumerate(docs):
        assert doc is not None, procs[rank].stderr[-2000:]
        assert doc["steps"] == 0 and doc["error"] and needle in doc["error"], doc
        assert doc["seconds"] < 30


@pytest.mark.parametrize("case", ["dies_before_wrap", "hangs_before_wrap", "dies_while_wrapping"])
def test_a_rank_lost_at_set_up_is_a_clear_error_within_the_timeout(case):
    procs = run_workers("safety.py", [case], timeout_s=120)
    doc = outputs(procs)[0]
    assert doc is not None, procs[0].stderr[-2000:]
    assert doc["steps"] == 0 and "a peer rank has probably died" in doc["error"], doc
    assert doc["seconds"] < TIMEOUT + 5, doc


def test_a_dead_rank_makes_the_survivor_fail_mid_training():
    procs = run_workers("safety.py", ["rank_dies"], timeout_s=120)
    assert procs[1].returncode == 17
    doc = outputs(procs)[0]
    assert doc is not None, procs[0].stderr[-2000:]
    # gloo reports the closed connection ("Connection closed by peer" or a read error, by timing)
    assert doc["steps"] == 3 and "remote worker" in doc["error"], doc
    assert doc["seconds"] < TIMEOUT
