"""commsched.DataParallel after a failed backward, with futures that complete inline, and with
gradients the caller keeps: real gloo processes, compared with stock DDP."""

from __future__ import annotations

from tests.distributed.launch import results, run_workers


def _docs(case: str) -> list[dict]:
    docs = results(run_workers("robustness.py", [case], timeout_s=180))
    for doc in docs:
        assert "crash" not in doc, doc.get("crash")
    return docs


def test_training_goes_on_after_a_backward_that_failed_part_way():
    for doc in _docs("failed_backward"):
        for mode in ("serialize=True", "serialize=False"):
            r = doc[mode]
            assert r["failed_with"] and "injected backward failure" in r["failed_with"], r
            # the failure came after some buckets were launched and before all were
            assert 0 < r["launched_in_failed"] < r["buckets"], r
            assert r["max_rel_diff"] <= 1e-6, (mode, r)


def test_futures_complete_before_then_neither_recurse_nor_lose_errors():
    for doc in _docs("inline_futures"):
        assert doc["buckets"] == 1200
        assert doc["error"] and "injected all-reduce failure" in doc["error"], doc
        assert doc["max_rel_diff"] <= 1e-6, doc


def test_a_kept_gradient_is_not_changed_by_the_next_step():
    for doc in _docs("kept_grad"):
        assert doc["max_rel_diff"] <= 1e-6, doc  # zero_grad(set_to_none=False) matches DDP
        assert not doc["kept_changed"] and doc["fresh_grad_tensor"], doc


def test_a_collective_after_drain_pairs_with_the_same_collective_on_every_rank():
    for doc in _docs("collective_after_failure"):
        for mode in ("serialize=True", "serialize=False"):
            assert doc[mode] == [3.0] * 4, (mode, doc)


def test_reentrant_checkpointing_and_a_second_backward_are_clear_errors():
    for doc in _docs("unsupported"):
        assert "use_reentrant=False" in doc["reentrant find_unused=True"], doc
        assert "reentrant" in doc["reentrant find_unused=False"], doc
        assert "second backward" in doc["second backward"], doc
        assert doc["non-reentrant grad diff"] <= 1e-6, doc


def test_buffer_sync_and_interleaved_no_sync_forwards_follow_ddp():
    docs = _docs("ddp_rules")
    for doc in docs:
        assert doc["eval_out_diff"] <= 1e-6 and doc["max_rel_diff"] <= 1e-6, doc
    assert docs[0]["eval_out"] == docs[1]["eval_out"]  # rank 0's buffers everywhere, as with DDP
