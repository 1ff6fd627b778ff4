"""commsched.DataParallel on real gloo processes: same numbers as DDP, the plan's buckets, safety."""

from __future__ import annotations

import pytest

from tests.distributed.launch import results, run_workers

ALL = ["wfbp", "synceasgd", "ddp", "ddp-small", "horovod", "horovod-legacy", "mgwfbp", "adafusion", "optimal"]


def _check(mode: str, tol: float):
    docs = results(run_workers("equivalence.py", [mode]))
    for doc in docs:
        assert set(doc["results"]) == set(ALL)
        for name, r in doc["results"].items():
            assert r["max_rel_diff"] <= tol, (mode, name, r["max_rel_diff"])
            assert r["layout_is_plan"], (mode, name)
            # the all-reduces really issued are the plan's buckets, in its order, every step
            assert r["allreduce_numels_first_step"] == r["plan_numels"], (mode, name)
            assert r["calls"] == 20 * r["buckets"], (mode, name)  # one reduction per bucket per step
    return docs


def test_every_strategy_matches_ddp_after_20_steps():
    docs = _check("plain", 1e-6)
    # the strategies really differ in bucketing, so the comparison is not one layout nine times
    layouts = {len(r["plan_numels"]) for r in docs[0]["results"].values()}
    assert len(layouts) >= 3


def test_gradient_accumulation_with_no_sync_matches_ddp():
    _check("no_sync", 1e-6)


def test_a_parameter_used_only_in_no_sync_micro_batches_is_reduced_as_by_ddp():
    _check("no_sync_unused", 1e-6)


def test_the_forward_decides_whether_a_backward_reduces_as_with_ddp():
    _check("forward_in_no_sync", 1e-6)


def test_frozen_parameters_are_left_out_and_match_ddp():
    docs = _check("frozen", 1e-6)
    assert not docs[0]["frozen_in_plan"]


def test_unused_parameters_match_ddp_with_find_unused():
    _check("unused", 1e-6)


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_half_precision_gradients_match_ddp(mode):
    _check(mode, 1e-2)


def test_the_two_line_api(tmp_path):
    docs = results(run_workers("two_lines.py", [str(tmp_path / "plan.json")]))
    assert all(d["strategy"] == "optimal" and d["same_on_all_ranks"] for d in docs)
    assert docs[0]["buckets"] == docs[1]["buckets"] >= 1
