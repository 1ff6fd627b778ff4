"""`commsched validate`'s torch side without a process group: the config, the cost benchmark's
statistic, the probe's passes, the models that share one copy of the weights."""

from __future__ import annotations

import pytest

from commsched.errors import CommschedError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("field", ["rounds", "steps", "resamples", "probe_iters", "chain_repeats"])
def test_config_rejects_non_positive_counts(field):
    from commsched.runtime.validate import ValidationConfig

    with pytest.raises(CommschedError, match=field):
        ValidationConfig("resnet18", 4, **{field: 0})


def test_chains_take_the_median_chain_so_one_stalled_chain_does_not_move_the_table(monkeypatch):
    """googlenet's table once had 16 MiB at the mean of four chains of ~70 ms and one of 160 ms."""
    import types

    import commsched.runtime.validate.probes as v

    chains = iter([0.0, 0.070, 0.160, 0.072, 0.071, 0.074])  # the warm-up chain first
    monkeypatch.setattr(v, "_chain_s", lambda bufs: next(chains) * len(bufs))
    monkeypatch.setattr(v, "_max_over_ranks", lambda values, op=None: list(values))
    fake = types.SimpleNamespace(barrier=lambda: None, get_backend=lambda: "gloo", get_world_size=lambda: 2, ReduceOp=types.SimpleNamespace(MIN="min"))
    monkeypatch.setattr(v, "dist", fake)
    s = v.bench_chains((16 << 20,), repeats=5)
    assert s.statistic == "median" and s.time_s == (0.072,)  # the mean would be 0.0894
    assert s.min_s == (0.070,) and s.max_s == (0.160,)


def test_probe_passes_start_without_gradients_as_training_steps_do():
    """A pass into existing gradients adds into them: on alexnet it took 60% longer than a step's."""
    from commsched.runtime.validate.probes import Probe

    torch.manual_seed(0)
    probe = Probe.__new__(Probe)  # without __init__: it sizes its messages on a process group
    probe.model, probe.inputs, probe.loss_fn = torch.nn.Linear(4, 2), (torch.randn(3, 4),), lambda out: out.sum()
    probe._backward(probe._forward())
    once = probe.model.weight.grad.clone()
    probe._backward(probe._forward())
    assert torch.equal(probe.model.weight.grad, once)  # not 2 x once


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def test_models_share_one_copy_of_the_weights_and_the_momentum_but_not_their_gradients():
    """Every model of a run trains the same storage with the same momentum (one copy each, whatever
    the number of strategies), while each has its own Parameter objects, hooks and gradients."""
    from commsched.runtime.validate.probes import SharedWeights, release_grads

    base = _net()
    shared = SharedWeights(base, lr=0.1)
    a, b = shared.module(), shared.module()
    for p, q, r in zip(base.parameters(), a.parameters(), b.parameters()):
        assert q is not p and r is not q and q.data_ptr() == p.data_ptr() == r.data_ptr()
    assert a[1].running_mean.data_ptr() != base[1].running_mean.data_ptr()  # buffers: each its own
    x = torch.randn(5, 8)
    opt_a, opt_b = shared.optimizer(a), shared.optimizer(b)
    for q, r, m in zip(a.parameters(), b.parameters(), shared.momentum):
        assert opt_a.state[q]["momentum_buffer"] is m is opt_b.state[r]["momentum_buffer"]
    a(x).sum().backward()
    assert all(p.grad is None for p in b.parameters())  # b's hooks and gradients are b's
    before = [p.detach().clone() for p in base.parameters()]
    opt_a.step()
    # the step moved the shared weights (seen from base and b) and filled the shared momentum in place
    assert any(not torch.equal(p, w) for p, w in zip(b.parameters(), before))
    assert all(torch.equal(m, q.grad) for m, q in zip(shared.momentum, a.parameters()))
    release_grads(a)
    assert all(p.grad is None for p in a.parameters())
    shared.reset()
    assert all(torch.equal(p, w) for p, w in zip(base.parameters(), before))
    assert all(not m.any() for m in shared.momentum)


def test_a_step_through_shared_weights_is_the_step_of_a_model_of_its_own():
    """The same SGD step from the same weights: a model of its own (as validate had one per
    strategy) and a SharedWeights module end at the same weights."""
    from commsched.runtime.validate.probes import SharedWeights

    x = torch.randn(5, 8)
    own = _net()
    opt = torch.optim.SGD(own.parameters(), lr=0.1, momentum=0.9)
    shared = SharedWeights(_net(), lr=0.1)
    m = shared.module()
    opt_m = shared.optimizer(m)
    for model, o in ((own, opt), (m, opt_m)):
        for _ in range(3):
            o.zero_grad(set_to_none=True)
            model(x).sum().backward()
            o.step()
    for p, q in zip(own.parameters(), shared.base.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_activation_bytes_count_what_the_forward_saves_once_and_leave_the_weights_out():
    from commsched.runtime.validate.probes import activation_bytes

    torch.manual_seed(0)
    lin = torch.nn.Linear(1000, 1000, bias=False)  # saves its input (4000 B x batch), not its weight
    x = torch.randn(7, 1000, requires_grad=True)
    assert activation_bytes(lin, (x,), lambda out: out.sum()) == 7 * 1000 * 4
    two = torch.nn.Sequential(lin, torch.nn.Tanh())  # tanh saves its output: one more batch of 1000
    assert activation_bytes(two, (x,), lambda out: out.sum()) == 2 * 7 * 1000 * 4


def test_a_variants_ddp_lives_for_its_turn_only():
    """validate holds one strategy's DDP (its reducer's buckets, a gradient copy) at a time: a
    variant's DDP is made when its turn starts and is gone, gradients and all, when it ends
    (resnet152 with five strategies had grown by a model copy or more per strategy)."""
    import gc
    import weakref

    import torch.distributed as dist

    from commsched.runtime.validate.probes import _NO_INIT_SYNC, SharedWeights, Variant

    assert _NO_INIT_SYNC == {"init_sync": False}  # else every turn would broadcast the weights
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        gc.disable()  # the variant must let its DDP go by itself, not by a collection that happens to run
        shared = SharedWeights(_net(), lr=0.1)
        v = Variant(None, shared, (torch.randn(5, 8),), lambda out: out.sum())
        assert v.ddp is None
        for outside in (v.step, v.end):
            with pytest.raises(CommschedError, match="start"):
                outside()
        for _ in range(2):  # two turns
            v.start()  # DDP made, its two untimed steps run, their gradients freed
            assert all(p.grad is None for p in v.model.parameters())
            assert v.ddp._has_rebuilt_buckets  # the second untimed step rebuilt them: no timed step does
            ddp = weakref.ref(v.ddp)
            assert v.step() > 0 and all(p.grad is not None for p in v.model.parameters())
            with pytest.raises(CommschedError, match="end"):
                v.start()
            v.end()
            assert v.ddp is None and ddp() is None
            assert all(p.grad is None for p in v.model.parameters())
    finally:
        gc.enable()
        dist.destroy_process_group()


class _Clip(torch.nn.Module):
    """CLIP's shape: two towers, and a temperature the loss applies (not forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.img = torch.nn.Linear(6, 4)
        self.txt = torch.nn.Linear(5, 4)
        self.logit_scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, a, b):
        return self.img(a), self.txt(b)


def _clip_loss(model):
    def loss(out):
        a, b = out
        return (model.logit_scale.exp() * a @ b.t()).logsumexp(1).mean()

    return loss


def test_a_loss_that_uses_the_models_own_parameters_reaches_each_copys():
    """Without routing, a copy's loss gave the original's logit_scale the gradient, and the copy's
    DDP waited for its own for good ("Expected to have finished reduction")."""
    from commsched.runtime.validate.probes import SharedWeights

    torch.manual_seed(0)
    base = _Clip()
    inputs = (torch.randn(3, 6), torch.randn(3, 5))
    shared = SharedWeights(base, lr=0.1, name="'clip'")
    shared.route_loss(inputs, _clip_loss(base))
    assert shared.routed
    copy, loss = shared.module_with_loss(_clip_loss(base))
    loss(copy(*inputs)).backward()
    assert copy.logit_scale.grad is not None and copy.img.weight.grad is not None
    assert all(p.grad is None for p in base.parameters())
    assert base.logit_scale is not copy.logit_scale  # put back after the loss
    # the gradient is the one the original model's own step gives
    reference = _clip_loss(base)(base(*inputs))
    reference.backward()
    assert torch.equal(copy.logit_scale.grad, base.logit_scale.grad)

    plain = SharedWeights(torch.nn.Linear(2, 1), lr=0.1)
    plain.route_loss((torch.randn(3, 2),), lambda out: out.sum())
    assert not plain.routed
    loss_fn = lambda out: out.sum()  # noqa: E731
    assert plain.module_with_loss(loss_fn)[1] is loss_fn  # nothing in the way of a plain loss


def test_a_hook_closed_over_the_model_reaches_each_copys_parameters():
    """A forward hook of the user's, copied with the model, still names the original: it is sent to
    the copy's parameters for the forward, as the loss is."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Sequential(torch.nn.Linear(4, 3))
    base.register_parameter("scale", torch.nn.Parameter(torch.tensor(0.5)))
    base.register_forward_hook(lambda m, i, out: out * base.scale)
    base.register_forward_pre_hook(lambda m, args: (args[0] + base.scale,))
    shared = SharedWeights(base, lr=0.1)
    shared.route_loss((torch.randn(2, 4),), lambda out: out.sum())
    assert shared.routed
    copy, loss = shared.module_with_loss(lambda out: out.sum())
    loss(copy(torch.randn(2, 4))).backward()
    assert copy.scale.grad is not None and base.scale.grad is None
    assert base.scale is not copy.scale and base[0].weight is not copy[0].weight  # put back after the forward
    with pytest.raises(RuntimeError, match="cannot be multiplied"):  # a forward that fails puts them back too
        copy(torch.randn(2, 5))
    assert base.scale is not copy.scale


def test_a_loss_holding_a_parameter_of_its_own_is_one_error_naming_it():
    from commsched.runtime.validate.probes import SharedWeights

    model = torch.nn.Linear(4, 2)
    temp = torch.nn.Parameter(torch.tensor(1.5))
    model.register_parameter("temp", temp)
    shared = SharedWeights(model, lr=0.1, name="'m'")
    with pytest.raises(CommschedError, match=r"loss function of 'm' \(or a hook of its model\) uses 1 parameter\(s\) of the model it was given directly \(temp\)"):
        shared.route_loss((torch.randn(3, 4),), lambda out: (out * temp).sum())


class _Odd(torch.nn.Module):
    def __init__(self) -> None:
        import threading

        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)
        self.lock = threading.Lock()  # deepcopy: "cannot pickle '_thread.lock' object"
        self.last = None

    def forward(self, x):
        with self.lock:
            self.last = torch.relu(self.a(x))  # a tensor autograd made: deepcopy refuses it
        return self.b(self.last)


def test_attributes_deepcopy_cannot_copy_are_shared_by_the_copies():
    from commsched.runtime.validate.probes import SharedWeights

    base = _Odd()
    base(torch.randn(2, 4)).sum().backward()
    shared = SharedWeights(base, lr=0.1)
    copy = shared.module()
    assert copy.lock is base.lock and copy.last is base.last
    assert copy.a.weight is not base.a.weight and copy.a.weight.data_ptr() == base.a.weight.data_ptr()
    assert shared.module().lock is base.lock  # found once, kept for every later copy


class _CachingHead(torch.nn.Linear):
    def forward(self, h):
        self.last = super().forward(h)  # a tensor autograd made, kept by the module
        return self.last


def test_an_uncopyable_attribute_the_models_own_forward_replaces_is_found_again():
    """A head applied in the loss runs the original's forward (routed), which replaces its kept
    tensor: the next copy failed on the new one ("cannot copy it")."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Module()
    base.body, base.head = torch.nn.Linear(4, 4), _CachingHead(4, 2)
    base.forward = lambda x: base.body(x)
    loss = lambda out: base.head(out).square().mean()  # noqa: E731
    inputs = (torch.randn(3, 4),)
    loss(base(*inputs)).backward()  # the model keeps a tensor autograd made
    shared = SharedWeights(base, lr=0.1)
    shared.route_loss(inputs, loss)
    for _ in range(3):
        copy, routed = shared.module_with_loss(loss)
        routed(copy(*inputs)).backward()
        assert copy.head.weight.grad is not None


class _Counter:
    """A hook object deepcopy cannot copy (it holds a lock)."""

    def __init__(self) -> None:
        import threading

        self.lock, self.calls = threading.Lock(), 0

    def __call__(self, module, args) -> None:
        with self.lock:
            self.calls += 1


def test_a_hook_deepcopy_cannot_copy_is_shared_but_each_copy_keeps_its_own_hooks():
    """The root's whole hook dict was shared when one hook in it could not be copied: every copy's
    routing hooks went into the model's dict, and a copy's forward ran with another copy's
    parameters (its own got no gradient)."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Sequential(torch.nn.Linear(4, 3))
    base.register_parameter("scale", torch.nn.Parameter(torch.tensor(0.5)))
    counter = _Counter()
    base.register_forward_pre_hook(counter)
    base.register_forward_hook(lambda m, i, out: out * base.scale)
    hooks = len(base._forward_pre_hooks)
    shared = SharedWeights(base, lr=0.1)
    shared.route_loss((torch.randn(2, 4),), lambda out: out.sum())
    copies = [shared.module_with_loss(lambda out: out.sum()) for _ in range(3)]
    for copy, loss in copies:
        loss(copy(torch.randn(2, 4))).backward()
        assert copy.scale.grad is not None and base.scale.grad is None
        assert copy._forward_pre_hooks is not base._forward_pre_hooks
    assert len(base._forward_pre_hooks) == hooks and counter.calls == 2 + 3  # route_loss's two passes, then each copy's


class _Tagged(torch.nn.Parameter):
    """A parameter subclass (as quantisation libraries keep theirs)."""


def test_copies_keep_their_parameters_class_attributes_and_gradient_hooks():
    """The copies' parameters were plain Parameters: a hook reading ``weight.gain`` (bitsandbytes
    reads ``weight.quant_state`` so) failed, and a gradient hook on a parameter was dropped."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Linear(3, 2)
    base.weight = _Tagged(base.weight.data)
    base.weight.gain = 2.0
    base.register_forward_hook(lambda m, i, out: out * m.weight.gain)
    base.bias.register_hook(lambda g: g * 0)  # a gradient hook: the bias never moves
    copy = SharedWeights(base, lr=0.1).module()
    assert type(copy.weight) is _Tagged and copy.weight.gain == 2.0 and copy.weight is not base.weight
    assert copy.weight.data_ptr() == base.weight.data_ptr()
    copy(torch.randn(4, 3)).sum().backward()
    assert torch.equal(copy.bias.grad, torch.zeros(2)) and copy.weight.grad.abs().sum() > 0


class _Capture:
    """A forward hook object keeping what it saw, for a loss to read (a feature or auxiliary loss)."""

    def __init__(self) -> None:
        self.features: list = []

    def __call__(self, module, args, out) -> None:
        self.features.append(out)


def test_a_hook_object_the_loss_reads_is_the_copies_too_and_a_computed_buffer_is_shared():
    """Each copy's hook was a deep copy of the object: it filled its own list, and the loss, reading
    the model's, found it empty ("pop from empty list"). A buffer autograd made could not be copied."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    capture = _Capture()
    base[1].register_forward_hook(capture)
    base.register_buffer("doubled", base[0].weight * 2)  # a tensor autograd made
    loss = lambda out: out.sum() + capture.features.pop().square().mean()  # noqa: E731
    shared = SharedWeights(base, lr=0.1)
    shared.route_loss((torch.randn(2, 4),), loss)
    model, routed = shared.module_with_loss(loss)
    routed(model(torch.randn(2, 4))).backward()
    assert model[0].weight.grad is not None and not capture.features
    assert model.doubled is base.doubled


def test_a_frozen_parameter_with_a_gradient_hook_is_copied():
    """Its hook was registered again on the copy, which torch refuses on a tensor without gradients."""
    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    for p in base.parameters():
        p.register_hook(lambda g: g.clamp(-1, 1))
    base[0].requires_grad_(False)  # the backbone frozen after the hooks
    copy = SharedWeights(base, lr=0.1).module()
    assert not copy[0].weight.requires_grad and copy[1].weight.requires_grad


class _Owned(torch.nn.Module):
    def __init__(self, owner) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        object.__setattr__(self, "owner", owner)  # a back-reference, not a submodule


def test_a_back_reference_to_the_model_is_not_taken_for_something_to_share():
    """The root held a lock and a submodule a back-reference to the root: the reference failed to
    copy alone, the root itself was marked shared, and every "copy" was the model."""
    import threading

    from commsched.runtime.validate.probes import SharedWeights

    base = torch.nn.Module()
    base.lock = threading.Lock()
    base.inner = _Owned(base)
    copy = SharedWeights(base, lr=0.1).module()
    assert copy is not base and copy.inner.owner is copy and copy.lock is base.lock


class _CallsItself(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x, again: bool = True):
        if again:  # a second view through the model itself
            x = self(x, again=False)
        return self.fc(x)


def test_a_model_that_calls_itself_stays_routed_for_its_whole_forward():
    """The inner call's restore put the model's parameters back while the outer forward ran: its
    hook, closed over the model, reached them, and the run was refused."""
    from commsched.runtime.validate.probes import SharedWeights

    base = _CallsItself()
    base.register_forward_hook(lambda m, i, out: out * base.scale)
    shared = SharedWeights(base, lr=0.1)
    shared.route_loss((torch.randn(2, 4),), lambda out: out.sum())
    model, loss = shared.module_with_loss(lambda out: out.sum())
    loss(model(torch.randn(2, 4))).backward()
    assert model.scale.grad is not None and base.scale.grad is None and base.scale is not model.scale


def test_a_model_deepcopy_cannot_copy_at_all_is_one_error():
    from commsched.runtime.validate.probes import SharedWeights

    class Stubborn(torch.nn.Linear):
        def __deepcopy__(self, memo):
            raise TypeError("not today")

    with pytest.raises(CommschedError, match="validate trains copies of 'x' .* cannot copy it: TypeError: not today"):
        SharedWeights(Stubborn(2, 2), lr=0.1, name="'x'").module()

    class Itself(torch.nn.Linear):
        def __deepcopy__(self, memo):
            return self

    with pytest.raises(CommschedError, match="copy.deepcopy of it keeps the model's own parameters .* Itself returning the model"):
        SharedWeights(Itself(2, 2), lr=0.1, name="'x'").module()
