"""The public API's arguments that are not what it takes are one CommschedError naming the argument,
not an AttributeError from inside commsched, torch's C++ constructor message (which dumps the
model's tensors and names nothing), or a flag quietly read as True; and advice an error gives
(pass batch_size=) is advice plan_for takes."""

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from commsched.errors import CommschedError


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _plan():
    from commsched import plan_for

    return plan_for(_model(), (torch.randn(4, 8),), _loss, strategy="wfbp", iters=2, warmup=1)


@pytest.mark.parametrize("model", [None, "model", lambda x: x])
def test_a_model_that_is_not_a_module_is_named(one_rank, model):
    from commsched import DataParallel, ddp_options, plan_for

    with pytest.raises(CommschedError, match=r"DataParallel takes the model as a torch.nn.Module, got"):
        DataParallel(model, tune=True)
    with pytest.raises(CommschedError, match=r"DataParallel takes the model as a torch.nn.Module"):
        DataParallel(model, _plan())
    with pytest.raises(CommschedError, match=r"plan_for takes the model as a torch.nn.Module, got " + type(model).__name__):
        plan_for(model, (torch.randn(4, 8),), _loss)
    if model is not None:  # ddp_options without a module is its one-dtype form
        with pytest.raises(CommschedError, match=r"ddp_options takes the model as a torch.nn.Module"):
            ddp_options(_plan(), model)


@pytest.mark.parametrize("flag", ["find_unused_parameters", "record", "static_graph", "gradient_as_bucket_view", "broadcast_buffers"])
def test_a_flag_that_is_not_a_bool_is_named_by_the_wrapper(one_rank, flag):
    from commsched import DataParallel

    with pytest.raises(CommschedError, match=rf"DataParallel: {flag} must be True or False, got str 'yes'"):
        DataParallel(_model(), _plan(), **{flag: "yes"})
    if flag != "record":  # recording is refused with tune=True anyway
        with pytest.raises(CommschedError, match=rf"{flag} must be True or False"):
            DataParallel(_model(), tune=True, **{flag: "yes"})


def test_flags_of_plan_for_and_ddp_options_are_bools_not_truthy_values(one_rank):
    from commsched import ddp_options, plan_for

    with pytest.raises(CommschedError, match=r"plan_for: find_unused_parameters must be True or False, got str 'no'"):
        plan_for(_model(), (torch.randn(4, 8),), _loss, find_unused_parameters="no")
    for flag in ("find_unused_parameters", "static_graph"):
        for bad in (2, 0.5, "True"):
            with pytest.raises(CommschedError, match=rf"ddp_options: {flag} must be True or False, got {type(bad).__name__} {bad!r}"):
                ddp_options(_plan(), _model(), **{flag: bad})
    assert ddp_options(_plan(), _model(), find_unused_parameters=True)["find_unused_parameters"] is True
    import numpy as np

    # what torch's C++ takes as flags and configs hold (YAML's 0/1, numpy's bool, None) stays taken
    for off in (np.bool_(False), 0, None):
        assert "static_graph" not in ddp_options(_plan(), _model(), static_graph=off)
    assert ddp_options(_plan(), _model(), static_graph=1)["static_graph"] is True


def test_a_loss_that_is_not_a_function_of_the_output_alone_is_named_with_the_way_to_give_it_targets(one_rank):
    import functools

    import torch.nn.functional as F

    from commsched import plan_for
    from commsched.profile.measure import measure_profile

    x = torch.randn(4, 8)
    with pytest.raises(CommschedError, match=r"plan_for: loss_fn must be a function of the model's output, got str 'mse'"):
        plan_for(_model(), (x,), "mse")
    for needs_targets in (nn.MSELoss(), F.mse_loss):  # called with the output alone, they raised inside torch
        with pytest.raises(CommschedError, match=r"plan_for: loss_fn is called with the model's output alone \(.*target.*\): give it the targets"):
            plan_for(_model(), (x,), needs_targets)
        with pytest.raises(CommschedError, match=r"measure_profile: loss_fn is called with the model's output alone"):
            measure_profile(_model(), (x,), needs_targets)
    y = torch.zeros(4, 1)
    for takes_output in (lambda out: F.mse_loss(out, y), functools.partial(F.mse_loss, target=y), _loss):
        assert plan_for(_model(), (x,), takes_output, iters=2, warmup=1).buckets


class _PackedLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, packed):
        _, (h, _) = self.lstm(packed)
        return self.head(h[-1])


class _ListInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, xs):
        return torch.cat([self.lin(x) for x in xs])


def test_a_packed_sequence_is_read_for_its_batch_and_plan_for_takes_the_batch_size_its_error_asks_for(one_rank):
    from commsched import plan_for
    from commsched.models.inputs import batch_of

    torch.manual_seed(0)
    packed = pack_padded_sequence(torch.randn(5, 3, 4), torch.tensor([5, 4, 2]))  # batch of 3, 11 tokens
    assert batch_of((packed,)) == 3 and batch_of({"seq": packed}) == 3
    assert plan_for(_PackedLSTM(), (packed,), _loss, iters=2, warmup=1).buckets
    xs = [torch.randn(2, 4), torch.randn(3, 4)]  # a list of tensors has no batch to read
    with pytest.raises(CommschedError, match=r"pass batch_size="):
        plan_for(_ListInput(), (xs,), _loss, iters=2, warmup=1)
    assert plan_for(_ListInput(), (xs,), _loss, iters=2, warmup=1, batch_size=2).buckets


def test_tune_config_takes_a_trial_rule_only_and_a_rule_whose_interval_means_something():
    from commsched import TrialRule, TuneConfig

    for rule in (None, "fast", {"block": 2}):
        with pytest.raises(CommschedError, match=r"TuneConfig.rule must be a commsched.TrialRule, got"):
            TuneConfig(rule=rule)
    with pytest.raises(CommschedError, match=r"TrialRule.resamples must be at least 100 .*got 1"):
        TrialRule(resamples=1)
    assert TuneConfig(rule=TrialRule(resamples=100)).rule.resamples == 100


def factory_with_a_two_argument_loss(batch_size: int = 4):
    """A factory as users write one from their training script: the loss wants the labels too."""
    return _model(), (torch.randn(batch_size, 8),), nn.MSELoss()


def test_a_factorys_loss_that_wants_targets_is_named_before_any_step():
    from commsched.models.source import build

    with pytest.raises(CommschedError, match=r"factory_with_a_two_argument_loss' returned a loss: loss_fn is called with the model's output alone"):
        build("tests.unit.test_api_arguments:factory_with_a_two_argument_loss", 4, None, None)


def test_losses_that_get_their_targets_some_other_way_are_taken():
    """Signatures that look like (input, target) but are called with the output alone and work: a
    decorator that gives the target, a module whose __call__ or forward pre-hook does."""
    import functools

    import torch.nn.functional as F

    from commsched.models.inputs import check_loss

    y = torch.zeros(4, 1)

    def with_target(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, y, **kwargs)
        return wrapper

    class CalledWithTarget(nn.MSELoss):
        def __call__(self, out):
            return super().__call__(out, y)

    hooked = nn.MSELoss()
    hooked.register_forward_pre_hook(lambda module, args: (*args, y))
    for loss in (with_target(F.mse_loss), CalledWithTarget(), hooked):
        check_loss(loss, "t")
        assert loss(torch.ones(4, 1)).item() == 1.0  # they do run on the output alone
