"""Item: stock DDP with ``ddp_options(plan)`` reduces exactly the plan's buckets from the step after
its rebuild, for every strategy on three zoo models of different shapes (real gloo processes)."""

from __future__ import annotations

from commsched.planners import STRATEGIES
from tests.distributed.launch import results, run_workers

MODELS = ["resnet18", "mobilenet_v2", "bert_small"]


def test_stock_ddp_reduces_every_strategys_buckets():
    docs = results(run_workers("ddp_buckets.py", [",".join(MODELS)], timeout_s=600))
    for doc in docs:
        assert set(doc["results"]) == {f"{m}/{s}" for m in MODELS for s in STRATEGIES}
        layouts = set()
        for key, r in doc["results"].items():
            plan = r["plan"]
            layouts.add((key.split("/")[0], len(plan)))
            # iteration 0 buckets the definition order; from the rebuild on, the plan's buckets in order
            for step in r["steps"][1:]:
                assert [sorted(b) for b in step] == [sorted(b) for b in plan], key
            assert r["indices_in_order"], key
        # the strategies really differ: several bucket counts per model
        for m in MODELS:
            assert len({n for model, n in layouts if model == m}) >= 3, (m, layouts)
