"""Mismatched plans are an error on every rank, not a hang; a dead rank is an error within the timeout."""

from __future__ import annotations

import json

import pytest

from tests.distributed.launch import run_workers


def outputs(procs):
    docs = []
    for p in procs:
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        docs.append(json.loads(lines[-1][7:]) if lines else None)
    return docs


@pytest.mark.parametrize(
    "case,needle",
    [("different_plans", "ranks hold different plans"), ("plan_does_not_fit", "does not fit the model on rank 1")],
)
def test_plan_mismatch_is_an_error_on_every_rank(case, needle):
    procs = run_workers("safety.py", [case], timeout_s=120)
    docs = outputs(procs)
    for rank, doc in enumerate(docs):
        assert doc is not None, procs[rank].stderr[-2000:]
        assert doc["steps"] == 0 and doc["error"] and needle in doc["error"], doc
        assert doc["seconds"] < 30


def test_a_dead_rank_makes_the_survivor_fail_within_the_timeout():
    procs = run_workers("safety.py", ["rank_dies"], timeout_s=120)
    assert procs[1].returncode == 17
    doc = outputs(procs)[0]
    assert doc is not None, procs[0].stderr[-2000:]
    assert doc["steps"] == 3 and "peer rank has probably died" in doc["error"], doc
    assert doc["seconds"] < 10 + 5  # DP_TIMEOUT plus slack
