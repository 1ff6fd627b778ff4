"""Issue 13, item 1 on gloo: each bucket goes to its config's group (the default group for a
bucket without one, and in iteration 0 for DDP buckets that are not the plan's), one group per
distinct config, and the parameters equal stock DDP's with the same caps and no hook (with the hook
on stock DDP and on commsched.DataParallel)."""

from __future__ import annotations

import pytest
import torch

from tests.distributed.launch import results, run_workers


def test_buckets_go_to_their_configs_groups_and_gradients_equal_stock_ddp():
    docs = results(run_workers("resource_hook.py", [], timeout_s=300))
    for doc in docs:
        configs = [tuple(c) if c is not None else None for c in doc["configs"]]
        groups = {eval(k): v for k, v in doc["groups"].items()}  # keys are str((blocks, threads))
        assert set(groups) == {c for c in configs if c is not None}
        assert len(set(groups.values())) == len(groups)  # one group per config, distinct
        assert doc["default"] not in groups.values()
        for step in doc["steps"][1:]:  # after DDP's rebuild: the plan's buckets, in order
            assert [entry[1] for entry in step] == list(range(len(configs)))
            for ddp_index, plan_index, key, name in step:
                want = configs[plan_index]
                assert (tuple(key) if key is not None else None) == want
                assert name == (groups[want] if want is not None else doc["default"])
        assert doc["max_rel_diff"] == 0.0  # two ranks: averaging before or after the sum is exact
        assert doc["max_rel_diff_commsched"] == 0.0  # the same hook on commsched.DataParallel
    assert docs[0]["steps"] == docs[1]["steps"]


def test_overriding_nccl_variables_are_reported():
    from commsched.runtime.resource_hook import env_overrides

    lines = env_overrides({"NCCL_NTHREADS": "256", "NCCL_MAX_CTAS": "4", "NCCL_DEBUG": "INFO", "NCCL_MIN_CTAS": ""})
    assert len(lines) == 2
    assert lines[0].startswith("NCCL_NTHREADS=256") and "threads per block" in lines[0]
    assert lines[1].startswith("NCCL_MAX_CTAS=4")
    assert env_overrides({}) == []


def test_plan_threads_and_bad_resources():
    from commsched.errors import CommschedError
    from commsched.runtime.resource_hook import config_key, plan_threads
    from commsched.types import Bucket, Plan

    def plan(*resources):
        return Plan("joint", "m", tuple(Bucket((f"t{i}",), 4, r) for i, r in enumerate(resources)))

    assert plan_threads(plan({"blocks": 1, "threads_per_block": 256}, None, {"blocks": 3, "threads_per_block": 256})) == 256
    assert plan_threads(plan({"blocks": 1, "threads_per_block": 256}, {"blocks": 1, "threads_per_block": 64})) is None
    assert plan_threads(plan(None)) is None
    with pytest.raises(CommschedError, match="blocks"):
        config_key({"threads_per_block": 64})
    with pytest.raises(CommschedError, match=r"blocks must be a whole number in \[1,"):
        config_key({"blocks": 0, "threads_per_block": 64})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: NCCL groups with min/max CTAs and the side stream")
def test_on_nccl_the_same_routing_and_gradients():
    """The CUDA path (one rank per GPU, at most two): groups made with ``min_ctas`` = ``max_ctas``,
    all-reduces launched from the side stream one after another; same checks as on gloo."""
    world = min(2, torch.cuda.device_count())
    docs = results(run_workers("resource_hook.py", ["nccl"], world=world, timeout_s=300))
    for doc in docs:
        assert doc["max_rel_diff"] <= (0.0 if world <= 2 else 1e-6)
        configs = [tuple(c) if c is not None else None for c in doc["configs"]]
        for step in doc["steps"][1:]:
            assert [entry[1] for entry in step] == list(range(len(configs)))
