"""commsched.planners.stock_ddp against torch's own bucket assignment, and the caps that express a plan."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from commsched.planners.stock_ddp import MIB, TensorInfo, assign, cap_mb_list, caps_bytes, express
from commsched.errors import CommschedError
from commsched.planners import STRATEGIES, make_plan
from commsched.cost.models import AlphaBeta
from commsched.types import Bucket, Plan, ModelProfile, TensorSpec

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("seed", range(40))
def test_assign_is_torchs_assignment_in_a_given_order(seed):
    """The same buckets as ``dist._compute_bucket_assignment_by_size`` with tensor_indices (the
    rebuild's call): per-dtype buckets, cap >= closes, caps advance per dtype, the last repeats."""
    rng = random.Random(seed)
    n = rng.randint(1, 30)
    dtypes = ["float32"] if seed % 3 else rng.choices(list(DTYPES), k=3)
    tensors = [torch.zeros(rng.choice([1, 3, 10, 100, 1000, 5000]), dtype=DTYPES[rng.choice(dtypes)]) for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    caps = [rng.choice([1, 64, 400, 4000, 40000]) for _ in range(rng.randint(1, 6))]
    # as the rebuild calls it: tensors in ready order, and their indices beside them
    theirs, _ = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], caps, [False] * n, order)
    infos = {i: TensorInfo(str(i), t.numel() * t.element_size(), str(t.dtype).removeprefix("torch.")) for i, t in enumerate(tensors)}
    ours = list(assign([infos[i] for i in order], caps))
    theirs = [tuple(str(i) for i in b) for b in theirs]
    # buckets still open at the end (at most one per dtype) come out of a hash map in torch: their
    # order is unspecified, so the tail of at most that many buckets is compared as a set
    tail = len({infos[i].dtype for i in order})
    assert theirs[:-tail] == ours[:-tail] and set(theirs[-tail:]) == set(ours[-tail:])


def test_iteration_zero_is_the_definition_order_reversed():
    """torch's initial call (no tensor_indices) sorts buckets by their smallest index; DDP then
    reverses the list. For one dtype that is the walk over definition order, reversed."""
    rng = random.Random(7)
    tensors = [torch.zeros(rng.choice([10, 100, 1000])) for _ in range(25)]
    caps = [800, 3000, 120]
    theirs, _ = dist._compute_bucket_assignment_by_size(tensors, caps)
    ours = assign([TensorInfo(str(i), t.numel() * 4) for i, t in enumerate(tensors)], caps)
    assert [tuple(str(i) for i in b) for b in theirs] == list(ours)


def _profile(sizes):
    return ModelProfile("m", 1, "x", "estimated", 0.01, tuple(TensorSpec(f"t{i}", s, 1e-4) for i, s in enumerate(sizes)))


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_caps_reproduce_every_strategys_plan_for_one_dtype(strategy):
    rng = random.Random(strategy)
    prof = _profile([rng.choice([4, 40, 4096, 10**5, 3 * 10**6]) for _ in range(60)])
    plan = make_plan(STRATEGIES[strategy], prof, AlphaBeta(1e-4, 1e-9))
    caps = caps_bytes(plan)
    got = assign([TensorInfo(t.name, t.bytes) for t in prof.tensors], caps)
    assert got == tuple(b.tensors for b in plan.buckets)
    # and the MiB values survive DDP's int(c * 2**20)
    assert [int(c * MIB) for c in cap_mb_list(caps)] == list(caps)


def test_mixed_dtypes_are_not_expressible_and_say_by_how_much():
    plan = Plan("x", "m", (Bucket(("a", "b"), 12), Bucket(("c",), 4)))
    infos = [TensorInfo("a", 8, "float32"), TensorInfo("b", 4, "float16"), TensorInfo("c", 4, "float32")]
    e = express(plan, infos)
    assert not e.exact and e.moved_bytes == 8 and "dtype" in e.reason  # c out, b in
    assert e.buckets == (("a", "c"), ("b",))  # float32 fills to 12 with c; float16's b stays open


def test_find_unused_lays_the_caps_over_the_definition_order():
    # ready order c.b c.w b.b b.w == reverse definition order: expressible
    plan = Plan("x", "m", (Bucket(("c.b", "c.w"), 20), Bucket(("b.b", "b.w"), 200)))
    infos = [TensorInfo("b.w", 160), TensorInfo("b.b", 40), TensorInfo("c.w", 16), TensorInfo("c.b", 4)]
    e = express(plan, infos, ["b.w", "b.b", "c.w", "c.b"])
    assert e.exact and e.caps == (200, 20)
    # a bucket that is not a run of the definition order is not
    plan2 = Plan("x", "m", (Bucket(("c.b", "b.b"), 44), Bucket(("c.w", "b.w"), 176)))
    e2 = express(plan2, infos, ["b.w", "b.b", "c.w", "c.b"])
    assert not e2.exact and e2.moved_bytes > 0


def test_bad_caps_are_errors():
    with pytest.raises(CommschedError, match="cap"):
        cap_mb_list([0])
    with pytest.raises(CommschedError, match="cap"):
        cap_mb_list([2**60])


def test_single_dtype_buckets_of_several_dtypes_get_shared_caps():
    """Each dtype consumes the caps on its own: bucket k of every dtype shares cap k."""
    plan = Plan("x", "m", (Bucket(("a",), 100), Bucket(("b",), 50), Bucket(("c",), 200)))
    infos = [TensorInfo("a", 100, "float32"), TensorInfo("b", 50, "float16"), TensorInfo("c", 200, "float32")]
    e = express(plan, infos)
    assert e.exact and e.caps[0] <= 50 and e.buckets == (("a",), ("b",), ("c",)), e


def test_mixed_dtype_expression_agrees_with_torch():
    """Random single-dtype-bucket plans over mixed dtypes: when express() says exact, torch's own
    assignment with its caps gives the plan's buckets."""
    for seed in range(200):
        rng = random.Random(seed)
        n = rng.randint(2, 12)
        dts = [rng.choice(["float32", "float16"]) for _ in range(n)]
        infos = [TensorInfo(f"t{i}", rng.choice([1, 10, 100, 1000]) * (4 if d == "float32" else 2), d) for i, d in enumerate(dts)]
        # buckets: contiguous runs of one dtype
        buckets, cur = [], [infos[0]]
        for t in infos[1:]:
            if t.dtype == cur[-1].dtype and rng.random() < 0.5:
                cur.append(t)
            else:
                buckets.append(cur)
                cur = [t]
        buckets.append(cur)
        plan = Plan("x", "m", tuple(Bucket(tuple(t.name for t in b), sum(t.bytes for t in b)) for b in buckets))
        e = express(plan, infos)
        ts = [torch.zeros(t.bytes // 2 if t.dtype == "float16" else t.bytes // 4, dtype=DTYPES[t.dtype]) for t in infos]
        theirs, _ = dist._compute_bucket_assignment_by_size(ts, list(e.caps), [False] * n, list(range(n)))
        theirs = [tuple(f"t{i}" for i in b) for b in theirs]
        assert [set(b) for b in theirs] == [set(b) for b in e.buckets] or len({t.dtype for t in infos}) > 1 and sorted(theirs) == sorted(e.buckets), (seed, e)
        if e.exact:
            assert sorted(theirs) == sorted(b.tensors for b in plan.buckets), (seed, e)
        else:  # moved bytes, or the same buckets in another order, and the reason says which
            assert e.moved_bytes > 0 or "another order" in e.reason, (seed, e)
