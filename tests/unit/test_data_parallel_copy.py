"""A copy of a DataParallel (copy.deepcopy, pickling) works as stock DDP's does: the wrapper without
its tuner or recorder, with the buckets in use when it was copied. Before, the tuner's process
group made every copy of a tuning wrapper fail ("cannot pickle ... ProcessGroup")."""

import copy
import pickle

import torch
import torch.distributed as dist
from torch import nn


def _buckets(ddp) -> int:
    return len(ddp.reducer._get_zeros_like_grad_buckets())


def _step(ddp, opt, seed: int) -> None:
    torch.manual_seed(seed)
    opt.zero_grad(set_to_none=True)
    ddp(torch.randn(4, 8)).pow(2).sum().backward()
    opt.step()


def test_a_copy_keeps_the_plan_tuning_kept_and_one_made_while_tuning_is_stock_ddp():
    from commsched.calibrate.trial import TrialRule
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        cfg = TuneConfig(strategy="wfbp", keep="plan", min_gain=0.0, max_cost=0.9, warmup_steps=2, calibration_steps=3, cache_dir="",
                         rule=TrialRule(block=1, min_pairs_reject=2, min_pairs_keep=2, max_pairs=4), log=False)
        dp = DataParallel(model, tune=cfg)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _step(dp, opt, 0)
        early = copy.deepcopy(dp)  # while tuning runs: stock DDP's buckets, no tuner
        assert early.tuner is None and early.recorder is None and early.plan is None
        step = 1
        while dp.tuning["phase"] != "calibrate":
            _step(dp, opt, step)
            step += 1
        _step(dp, opt, step)
        step += 1
        calibrating = copy.deepcopy(dp)  # the tuner's recorder is on the wrapper now: it stays behind
        assert calibrating.tuner is None and not calibrating._forward_pre_hooks and not calibrating._forward_hooks
        while dp.tuning["phase"] != "done":
            _step(dp, opt, step)
            step += 1
            assert step < 40, dp.tuning
        assert dp.tuning["kept"] == "wfbp"
        kept = copy.deepcopy(dp)
        assert kept.tuner is None and dp.tuner.plan is not None and kept.plan == dp.tuner.plan
        assert pickle.loads(pickle.dumps(dp)).plan == dp.tuner.plan  # pickling too (torch.save of the model)
        assert all(torch.equal(a, b) for a, b in zip(kept.module.parameters(), model.parameters()))
        copy_opt = torch.optim.SGD(kept.module.parameters(), lr=0.01)
        for s in range(2):  # DDP lays the plan's caps in ready order from the second step on
            _step(kept, copy_opt, 100 + s)
            _step(dp, opt, 100 + s)
        assert _buckets(kept) == _buckets(dp.tuner.active) == len(dp.tuner.plan.buckets) > 1
        assert all(torch.equal(a, b) for a, b in zip(kept.module.parameters(), model.parameters()))
        early_opt = torch.optim.SGD(early.module.parameters(), lr=0.01)
        for s in range(2):
            _step(early, early_opt, 200 + s)
        assert _buckets(early) == 1  # stock DDP's defaults: this model fits one bucket
    finally:
        dist.destroy_process_group()


def test_a_copy_of_a_recording_wrapper_leaves_the_recorder_behind_and_keeps_the_plan():
    import commsched

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        plan = commsched.plan_for(model, (torch.randn(4, 8),), lambda out: out.sum(), strategy="wfbp", iters=2, warmup=1)
        dp = commsched.DataParallel(model, plan, record=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _step(dp, opt, 0)
        c = copy.deepcopy(dp)
        assert c.recorder is None and c.plan == plan and not c._forward_pre_hooks and not c._forward_hooks
        c_opt = torch.optim.SGD(c.module.parameters(), lr=0.01)
        for s in range(2):
            _step(c, c_opt, 10 + s)
            _step(dp, opt, 10 + s)
        assert _buckets(c) == len(plan.buckets) > 1 and len(dp.records) == 3
        assert all(torch.equal(a, b) for a, b in zip(c.module.parameters(), model.parameters()))
    finally:
        dist.destroy_process_group()


def test_a_copy_with_static_graph_made_after_a_step_lays_the_plans_buckets():
    """Stock DDP's own copy of a static-graph DDP that has trained never queues its first
    iteration's delayed all-reduces (it copies the flag saying they were), and its buckets stay
    those of definition order: the wrapper's copy starts afresh."""
    import commsched

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        plan = commsched.plan_for(model, (torch.randn(4, 8),), lambda out: out.sum(), strategy="wfbp", iters=2, warmup=1)
        dp = commsched.DataParallel(model, plan, static_graph=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _step(dp, opt, 0)
        c = copy.deepcopy(dp)
        c_opt = torch.optim.SGD(c.module.parameters(), lr=0.01)
        for s in range(3):
            _step(c, c_opt, 10 + s)
        assert _buckets(c) == len(plan.buckets) > 1
    finally:
        dist.destroy_process_group()


def test_at_exit_the_tuners_own_ddps_are_let_go_while_python_runs():
    """The handler tuning registers with atexit drops the plan's DDP (and the rest of the tuner's
    own) and collects them: left to the interpreter's teardown they aborted some gloo jobs at exit
    (docs/limitations.md). The wrapper's own reducer, the user's, stays as stock DDP's does."""
    import atexit
    import weakref

    from commsched.calibrate.trial import TrialRule
    from commsched.runtime import tune
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    registered = []
    real_register = atexit.register
    atexit.register = lambda fn, *args: registered.append((fn, args))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        cfg = TuneConfig(strategy="wfbp", keep="plan", min_gain=0.0, max_cost=0.9, warmup_steps=2, calibration_steps=3, cache_dir="",
                         rule=TrialRule(block=1, min_pairs_reject=2, min_pairs_keep=2, max_pairs=4), log=False)
        dp = DataParallel(model, tune=cfg)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        step = 0
        while dp.tuning["phase"] != "done":
            _step(dp, opt, step)
            step += 1
            assert step < 40, dp.tuning
        plan_ddp = weakref.ref(dp.tuner.plan_ddp)
        assert plan_ddp() is not None and [fn for fn, _ in registered] == [tune._release_at_exit]
        fn, args = registered[0]
        fn(*args)
        assert plan_ddp() is None and dp.tuner.plan_ddp is None and dp.tuner.recorder is None
    finally:
        atexit.register = real_register
        dist.destroy_process_group()


def test_hooks_ddp_registers_as_it_is_built_and_hooks_it_refuses_leave_tuning_as_it_is(monkeypatch):
    """DDP's own __init__ registers a comm hook for ``mixed_precision``, before the wrapper has a
    tuner (before: AttributeError); a hook DDP refuses is refused before tuning ends for it."""
    import pytest

    from commsched.calibrate.trial import TrialRule
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    got = []
    monkeypatch.setattr(nn.parallel.DistributedDataParallel, "register_comm_hook", lambda self, state, hook: got.append(hook))
    building = DataParallel.__new__(DataParallel)  # as inside DDP's __init__: no tuner attribute yet
    building.register_comm_hook(None, print)
    assert got == [print]
    monkeypatch.undo()

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        cfg = TuneConfig(strategy="wfbp", keep="plan", min_gain=0.0, max_cost=0.9, warmup_steps=2, calibration_steps=3, cache_dir="",
                         rule=TrialRule(block=1, min_pairs_reject=2, min_pairs_keep=2, max_pairs=4), log=False)
        dp = DataParallel(model, tune=cfg)
        with pytest.raises(TypeError, match="must be callable"):  # DDP's own check of the hook
            dp.register_comm_hook(None, 3)
        assert dp.tuning["phase"] == "warmup" and dp.tuning["decision"] is None
    finally:
        dist.destroy_process_group()


def test_a_static_graph_set_again_keeps_tuning_and_one_set_late_ends_it():
    """``static_graph=True`` then ``_set_static_graph()`` again (stock DDP only warns): tuning went
    on until the second call ended it, with advice to pass the flag the job passed."""
    import warnings

    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cfg = TuneConfig(cache_dir="", log=False)
        dp = DataParallel(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), tune=cfg, static_graph=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # stock DDP's "no need to set it again"
            dp._set_static_graph()
        assert dp.tuning["phase"] == "warmup" and dp.tuning["decision"] is None
        late = DataParallel(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), tune=cfg)
        late._set_static_graph()
        assert late.static_graph and late.tuning["phase"] == "done" and late.tuning["decision"] == "stock"
        assert "_set_static_graph()" in late.tuning["reason"]
    finally:
        dist.destroy_process_group()


def test_a_model_with_an_empty_parameter_is_not_tuned_and_says_why():
    """Its planning failed on "bytes must be a positive whole number" after calibrating, with a
    warning pointing into torch."""
    from commsched.runtime.data_parallel import DataParallel
    from commsched.runtime.tune import TuneConfig

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.Sequential(nn.Linear(8, 2))
        model.register_parameter("empty", nn.Parameter(torch.zeros(0)))
        dp = DataParallel(model, tune=TuneConfig(cache_dir="", log=False))
        assert dp.tuning["phase"] == "done" and dp.tuning["decision"] == "stock"
        assert "trainable parameter(s) without elements (empty)" in dp.tuning["reason"]
    finally:
        dist.destroy_process_group()
