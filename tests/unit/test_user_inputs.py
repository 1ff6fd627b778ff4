"""What a user hands commsched by mistake is a one-line error naming it: a factory that raises, a
plan that lists a tensor twice, a path where a plan goes, a cluster of the wrong type, an output
folder that cannot be written; a factory that takes no batch size is run at its own, and one whose
inputs are by keyword (a dict) is run with them by keyword."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest
import torch
from torch import nn

import commsched
from commsched.errors import CommschedError
from commsched.formats.io import load_plan
from commsched.models.source import build


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "userfactories.py").write_text(textwrap.dedent('''
        import torch
        from torch import nn

        def fixed():  # no batch_size: its own batch of 4
            return nn.Linear(8, 2), torch.randn(4, 8), lambda out: out.sum()

        def sized(batch_size):
            return nn.Linear(8, 2), torch.randn(batch_size, 8), lambda out: out.sum()

        def raises(batch_size):
            raise ValueError("no such layer")

        def needs_depth(*, depth):
            return nn.Linear(8, 2), torch.randn(4, 8), lambda out: out.sum()

        def pair():
            return nn.Linear(8, 2), torch.randn(4, 8)

        class Masked(nn.Module):  # takes its inputs by keyword, as Hugging Face models do
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

            def forward(self, input_ids, attention_mask):
                return self.b(torch.relu(self.a(input_ids * attention_mask)))

        def keywords(batch_size):
            inputs = {"input_ids": torch.randn(batch_size, 8), "attention_mask": torch.ones(batch_size, 8)}
            return Masked(), inputs, lambda out: out.sum()

        def keywords_own_batch():
            return Masked(), {"attention_mask": torch.ones(3, 8), "input_ids": torch.randn(3, 8)}, lambda out: out.sum()

        def placed(batch_size, device="cpu"):  # builds where it is told; its loss holds labels there
            labels = torch.zeros(batch_size, dtype=torch.long, device=device)
            model = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4)).to(device)
            return model, torch.randn(batch_size, 8, device=device), lambda out: nn.functional.cross_entropy(out, labels)

        def labelled(batch_size):  # its loss holds labels on the CPU
            labels = torch.zeros(batch_size, dtype=torch.long)
            return nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4)), torch.randn(batch_size, 8), lambda out: nn.functional.cross_entropy(out, labels)

        def numbered_keys():
            return nn.Linear(8, 2), {0: torch.randn(4, 8)}, lambda out: out.sum()

        def a_number():
            return nn.Linear(8, 2), 4, lambda out: out.sum()

        def lazy(batch_size):  # shapes known after a first forward
            model = nn.Sequential(nn.LazyLinear(6), nn.LazyBatchNorm1d(), nn.Dropout(0.5), nn.Linear(6, 2))
            model[3].eval()  # a module the user put in eval mode stays so
            return model, torch.randn(batch_size, 5), lambda out: out.sum()

        class BodyAndLazyHead(nn.Module):  # forward runs the body only
            def __init__(self):
                super().__init__()
                self.body, self.head = nn.Linear(5, 6), nn.LazyLinear(3)

            def forward(self, x):
                return self.body(x)

        def lazy_head_in_loss(batch_size):  # the loss applies the lazy head (an lm_head in the loss)
            model = BodyAndLazyHead()
            return model, torch.randn(batch_size, 5), lambda out: model.head(out).sum()

        def lazy_never_used(batch_size):
            return BodyAndLazyHead(), torch.randn(batch_size, 5), lambda out: out.sum()

        def lazy_fails(batch_size):
            return nn.Sequential(nn.LazyLinear(6), nn.Linear(7, 2)), torch.randn(batch_size, 5), lambda out: out.sum()
    '''))
    (tmp_path / "brokenfactories.py").write_text("raise RuntimeError('the module itself fails')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("userfactories", "brokenfactories"):
        sys.modules.pop(name, None)


def test_a_factory_without_a_batch_size_is_built_at_its_own(factories):
    assert build("userfactories:fixed", 64, 128).batch_size == 4
    assert build("userfactories:fixed", 64, 128).image_size is None
    assert build("userfactories:sized", 16).batch_size == 16
    assert build("resnet18", 2, 32).batch_size == 2


@pytest.mark.parametrize(("spec", "words"), [
    ("userfactories:raises", ["model factory 'userfactories:raises' failed", "ValueError: no such layer", "userfactories.py:"]),
    ("userfactories:needs_depth", ["model factory 'userfactories:needs_depth' failed", "TypeError", "depth"]),
    ("brokenfactories:f", ["importing 'brokenfactories'", "RuntimeError: the module itself fails", "brokenfactories.py:1"]),
    ("userfactories:pair", ["must return (model, example_inputs, loss_fn), got a tuple of 2 items"]),
    ("userfactories:numbered_keys", ["the example inputs 'userfactories:numbered_keys' returned by keyword need names (strings) as keys, got 0"]),
    ("userfactories:a_number", ["the example inputs 'userfactories:a_number' returned must be a tensor, a tuple of positional inputs or a dict of keyword inputs, got int"]),
])
def test_a_factory_that_fails_is_one_line_naming_it(factories, spec, words):
    with pytest.raises(CommschedError) as e:
        build(spec, 8)
    assert all(w in str(e.value) for w in words), str(e.value)
    assert "\n" not in str(e.value)


def test_inputs_by_keyword_are_profiled_and_planned_as_positional_ones_are(factories):
    """A factory's dict of inputs reaches the model's forward by keyword: the batch is read from the
    first tensor in the dict, and measuring, the inventory and plan_for run the model on it."""
    from commsched.models.inventory import inventory
    from commsched.profile.measure import measure_profile

    built = build("userfactories:keywords", 6)
    assert isinstance(built.inputs, dict) and built.batch_size == 6
    assert build("userfactories:keywords_own_batch", 64).batch_size == 3
    profile = measure_profile(built.model, built.inputs, built.loss_fn, warmup=0, iters=1)
    assert profile.batch_size == 6 and set(profile.names) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    inv = inventory(built.model, built.inputs, built.loss_fn)
    assert inv.batch_size == 6 and len(inv.tensors) == 4 and sum(t.forward_flops for t in inv.tensors) > 0
    plan = commsched.plan_for(built.model, built.inputs, built.loss_fn, iters=1, warmup=0)
    assert sorted(n for b in plan.buckets for n in b.tensors) == sorted(profile.names)
    # a tensor alone is one positional input, as before
    assert measure_profile(nn.Linear(8, 2), torch.randn(5, 8), warmup=0, iters=1).batch_size == 5
    with pytest.raises(CommschedError, match="example_inputs must be a tensor, a tuple of positional inputs or a dict of keyword inputs, got str"):
        measure_profile(nn.Linear(8, 2), "tokens")


def test_a_factory_gets_the_device_where_it_takes_one_and_library_calls_leave_the_callers_draws(factories):
    """build passes device only to a factory that takes it (and says so); measuring, estimating and
    naming a trace's gradients by import path restore torch's generators, as a library call must;
    a trace's names need no batch of the job's size (a batch of 1 trains BatchNorm badly)."""
    from commsched.profile.from_trace import factory_params
    from commsched.profile.measure import measure_factory_profile
    from commsched.profile.zoo_profile import factory_profile

    assert build("userfactories:placed", 4, device="cpu").device == "cpu"
    assert build("userfactories:labelled", 4, device="cpu").device is None
    assert build("userfactories:placed", 4).device is None
    for call in (
        lambda: factory_params("userfactories:labelled"),
        lambda: measure_factory_profile("userfactories:labelled", 4, device="cpu", warmup=0, iters=1),
        lambda: factory_profile("userfactories:labelled", 64, "V100"),
    ):
        torch.manual_seed(123)
        call()
        after = torch.rand(3)
        torch.manual_seed(123)
        assert torch.equal(after, torch.rand(3))
    names = [p.name for p in factory_params("userfactories:labelled")]  # in ready order: the BatchNorm's first
    assert sorted(names[:2]) == ["1.bias", "1.weight"] and sorted(names[2:]) == ["0.bias", "0.weight"]
    profile, note = factory_profile("userfactories:labelled", 64, "V100", image_size=96)
    assert profile.batch_size == 64 and "takes no image_size" in note and "--image-size 96" in note
    assert measure_factory_profile("userfactories:labelled", 4, device="cpu", warmup=0, iters=1)[1] == ""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; make gpu-check runs it")
def test_on_a_gpu_a_factory_is_measured_where_it_builds_and_a_loss_left_on_the_cpu_is_named(factories):
    from commsched.profile.measure import measure_factory_profile

    profile, _ = measure_factory_profile("userfactories:placed", 4, device="cuda", warmup=1, iters=2)
    assert profile.device == torch.cuda.get_device_name() and len(profile.tensors) == 4
    with pytest.raises(CommschedError, match="takes no device: its model and inputs were moved to cuda"):
        measure_factory_profile("userfactories:labelled", 4, device="cuda", warmup=0, iters=1)


def test_a_plan_that_lists_a_tensor_twice_is_refused(tmp_path):
    doc = {"schema": "commsched.plan/v1", "strategy": "x", "model": "m",
           "buckets": [{"tensors": ["a", "b"], "bytes": 8}, {"tensors": ["c", "a"], "bytes": 8}]}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    with pytest.raises(CommschedError, match=r"buckets\[1\]: tensor 'a' is already in buckets\[0\]"):
        load_plan(tmp_path / "p.json")


@pytest.mark.parametrize("field, value, said", [("model", 7, "model must be a string, got 7"), ("params", [1], "params must be an object, got [1]")])
def test_a_plan_field_of_the_wrong_type_is_refused_not_turned_into_text(tmp_path, field, value, said):
    doc = {"schema": "commsched.plan/v1", "strategy": "x", "model": "m", "buckets": [{"tensors": ["a"], "bytes": 8}], field: value}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    with pytest.raises(CommschedError, match=re.escape(said)):
        load_plan(tmp_path / "p.json")
    doc[field] = None if field == "params" else "m"
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert load_plan(tmp_path / "p.json").params == {}


@pytest.mark.parametrize("plan", ["out/plan.json", None, 42])
def test_what_is_not_a_plan_is_named(plan):
    with pytest.raises(CommschedError, match="ddp_options takes a commsched Plan") as e:
        commsched.ddp_options(plan)
    assert ("commsched.load_plan(path)" in str(e.value)) == isinstance(plan, str)


def test_plan_for_names_a_cluster_of_the_wrong_type():
    model = nn.Linear(4, 2)
    with pytest.raises(CommschedError, match="cluster must be a preset's name, a cluster file's path or a ClusterSpec, got int 42"):
        commsched.plan_for(model, (torch.randn(2, 4),), lambda out: out.sum(), cluster=42)


def test_plan_for_reads_a_cluster_file_of_any_name(tmp_path):
    from commsched.cost.cluster import preset

    path = tmp_path / "mycluster.cfg"
    path.write_text(json.dumps(preset("v100-10gbe").to_json()))
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    plan = commsched.plan_for(model, (torch.randn(2, 4),), lambda out: out.sum(), cluster=str(path), iters=1, warmup=0)
    assert plan.buckets


def test_an_output_folder_that_cannot_be_written_is_found_before_measuring(tmp_path):
    from commsched.runtime.validate.run import _unwritable

    assert _unwritable(str(tmp_path / "new" / "folder")) is None
    assert not (tmp_path / "new").exists()  # tried, and left as it was
    assert _unwritable(str(tmp_path)) is None and tmp_path.is_dir() and not any(tmp_path.iterdir())
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "cannot write the report to --out" in _unwritable(str(blocker / "out"))


def test_a_model_with_nothing_to_reduce_is_named(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        frozen = nn.Linear(4, 2).requires_grad_(False)
        from commsched.types import Bucket, Plan

        for args, kwargs in (((), {"tune": True}), ((Plan("x", "m", (Bucket(("weight", "bias"), 40),)),), {})):
            with pytest.raises(CommschedError, match="no parameter that requires a gradient: DDP has nothing to reduce"):
                commsched.DataParallel(frozen, *args, **kwargs)
    finally:
        dist.destroy_process_group()


class _TiedLM(nn.Module):
    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        if tied:
            self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(self.emb(x))


def test_a_plan_of_the_tied_model_on_the_untied_one_names_both_causes():
    from commsched.types import Bucket, Plan

    tied_plan = Plan("wfbp", "lm", (Bucket(("emb.weight",), 160),))
    commsched.ddp_options(tied_plan, _TiedLM(tied=True))  # the model it was made for: no error
    with pytest.raises(CommschedError, match=r"leaves out 1 trainable parameter\(s\), first 'head.weight': a parameter unused .*"
                       r"or a plan made for another model \(one with tied weights"):
        commsched.ddp_options(tied_plan, _TiedLM(tied=False))


def test_a_plan_stock_ddp_cannot_reduce_exactly_is_named_once_quoted():
    from commsched.types import Bucket, Plan

    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())  # DDP buckets each dtype apart
    plan = Plan("mgwfbp", "m", (Bucket(("0.weight", "0.bias", "1.weight", "1.bias"), 24 + 48),))
    with pytest.warns(UserWarning, match=r"cannot reduce exactly the buckets of plan 'mgwfbp' \(") as got:
        commsched.ddp_options(plan, mixed)
    assert "''" not in str(got[0].message)


def test_a_factorys_lazy_modules_are_initialised_without_moving_its_statistics(factories):
    """validate's copies and memory estimate read the parameters' shapes: an uninitialised lazy
    parameter failed its memory phase with a traceback."""
    from torch.nn.parameter import is_lazy

    built = build("userfactories:lazy", 4)
    model = built.model
    assert not any(is_lazy(t) for t in (*model.parameters(), *model.buffers()))
    assert model[0].weight.shape == (6, 5)
    assert torch.equal(model[1].running_mean, torch.zeros(6)) and int(model[1].num_batches_tracked) == 0
    assert [m.training for m in model] == [True, True, True, False] and model.training
    with pytest.raises(CommschedError, match=r"'userfactories:lazy_fails' failed on its example inputs \(a forward pass that initialises its lazy"):
        build("userfactories:lazy_fails", 4)
    assert build("userfactories:lazy_head_in_loss", 4).model.head.weight.shape == (3, 6)
    with pytest.raises(CommschedError, match=r"'userfactories:lazy_never_used' has lazy parameters its example inputs and loss do not initialise \(head.weight"):
        build("userfactories:lazy_never_used", 4)


def test_plan_for_initialises_lazy_modules_and_ddp_options_names_them():
    """A lazy model's parameters have no size yet: plan_for and ddp_options failed in torch's
    ``numel`` (a traceback); plan_for now initialises them as the job's first step would."""
    from torch.nn.parameter import is_lazy

    from commsched.types import Bucket, Plan

    model = nn.Sequential(nn.LazyLinear(6), nn.ReLU(), nn.Linear(6, 2))
    with pytest.raises(CommschedError, match=r"lazy parameters not initialised yet \(0.weight, 0.bias\): run a forward pass"):
        commsched.ddp_options(Plan("wfbp", "m", (Bucket(("2.weight", "2.bias"), 56),)), model)
    plan = commsched.plan_for(model, (torch.randn(4, 5),), lambda out: out.sum(), strategy="wfbp", iters=1, warmup=0)
    assert not any(is_lazy(p) for p in model.parameters()) and model[0].weight.shape == (6, 5)
    assert {n for b in plan.buckets for n in b.tensors} == {"0.weight", "0.bias", "2.weight", "2.bias"}


class _ChangesItself(nn.Module):
    """A forward that rebinds a buffer (an EMA of its inputs), renormalises an embedding in place
    (``max_norm``) and applies a weight constraint in place."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8, max_norm=1.0)
        self.lin = nn.Linear(8, 3)
        self.register_buffer("ema", torch.zeros(8))

    def forward(self, ids):
        h = self.emb(ids).mean(1)
        self.ema = 0.9 * self.ema + 0.1 * h.detach().mean(0)
        with torch.no_grad():
            self.lin.weight.mul_(0.99)
        return self.lin(h - self.ema)


def test_plan_for_leaves_a_model_that_changes_itself_as_it_was():
    """Its measuring steps left the rebound buffer, the renormalised rows and the constrained weight
    on rank 0 only: DataParallel then broadcast them, and training differed from stock DDP's."""
    torch.manual_seed(0)
    model = _ChangesItself()
    with torch.no_grad():
        model.emb.weight.mul_(3.0)  # rows over max_norm: the forward renormalises them
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ema = model.ema
    commsched.plan_for(model, (torch.randint(0, 20, (4, 5)),), lambda out: out.sum(), strategy="wfbp", iters=2, warmup=1)
    assert model.ema is ema
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), [k for k, v in model.state_dict().items() if not torch.equal(before[k], v)]


def test_the_default_loss_reads_a_dataclass_output():
    """A model returning a @dataclass of tensors was "holds no floating-point tensor"."""
    import dataclasses

    from commsched.models.inventory import sum_of_means

    @dataclasses.dataclass
    class Out:
        logits: torch.Tensor
        aux: tuple

    @dataclasses.dataclass
    class Linked:
        value: torch.Tensor
        parent: object = None
        note: str = dataclasses.field(init=False)  # declared, never set

    w = torch.ones(3, requires_grad=True)
    loss = sum_of_means(Out(w * 2, (w * 3, "tag")))
    assert float(loss.detach()) == 5.0 and loss.requires_grad
    node = Linked(w * 4)
    node.parent = node  # a record that refers to itself is walked once
    assert float(sum_of_means(node).detach()) == 4.0


class _GrowsItself(nn.Module):
    """A forward that registers a buffer and builds a submodule on its first call, and resizes an
    observer-like buffer (as quantisation observers do)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.register_buffer("observed", torch.zeros(0))

    def forward(self, x):
        if not hasattr(self, "seen"):
            self.register_buffer("seen", torch.ones(1))
            self.extra = nn.Identity()
        self.observed = x.detach().amax(0)  # rebound, another shape
        return self.lin(x)


def test_measuring_restores_what_the_forward_registers_and_leaves_a_callers_graph_alone():
    """Buffers and submodules a measuring step added stayed on rank 0 only; a resized buffer failed
    the restore; and restoring every tensor, changed or not, broke a graph the caller had built."""
    from commsched.profile.measure import measure_profile

    model = _GrowsItself()
    names = [n for n, _ in model.named_buffers()], [n for n, _ in model.named_modules()]
    kept = model(torch.randn(3, 4)).sum() + model.lin.weight.pow(2).sum()  # the caller's graph: it saved lin.weight
    del model.seen, model.extra
    model.observed = torch.zeros(0)
    measure_profile(model, (torch.randn(3, 4),), lambda out: out.sum(), iters=1, warmup=0)
    assert ([n for n, _ in model.named_buffers()], [n for n, _ in model.named_modules()]) == names
    assert model.observed.shape == (0,)
    kept.backward()  # its saved tensors were not written



def test_measuring_a_model_with_a_sparse_buffer_leaves_it_alone():
    """torch.equal has no sparse kernel: an untouched sparse buffer was taken for one that could not be restored."""
    from commsched.profile.measure import measure_profile

    model = nn.Linear(4, 2)
    model.register_buffer("mask", torch.sparse_coo_tensor([[0, 3]], [1.0, 1.0], (4,), check_invariants=True))
    mask = model.mask
    measure_profile(model, (torch.randn(3, 4),), lambda out: out.sum(), iters=1, warmup=0)
    assert model.mask is mask
