"""Issue 13, item 1 on gloo: each bucket goes to its config's group (the default group for a
bucket without one, and in iteration 0 for DDP buckets that are not the plan's), one group per
distinct config, and the parameters equal stock DDP's with the same caps and no hook (with the hook
on stock DDP and on commsched.DataParallel).

Issue 31: NCCL limits are decided by the backend that serves CUDA tensors (the group's backend
config), not by ``get_backend()``; dropped limits are a warning; every group's communicator is
made and warmed up when the routing is built; serialisation is decided per bucket where its buffer
lives; every NCCL variable that overrides a plan is reported. The CPU tests run a one-rank gloo
group in this process; the NCCL cases that need a GPU are marked ``cuda``."""

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
        # every config's group was warmed up when the routing was built, at each size of its buckets
        want = {(*configs[i], "cpu", "torch.float32", n) for i, n in enumerate(doc["bucket_numels"]) if configs[i] is not None}
        assert {tuple(w) for w in doc["warmed"]} == want
        assert doc["cuda_backend"] == "gloo" and doc["get_backend"] == "gloo"
    assert docs[0]["steps"] == docs[1]["steps"]


def test_every_nccl_variable_that_overrides_a_plan_is_reported():
    """Issue 31 item 2: the process-wide variables (NCCL 2.30.7's source for each, OVERRIDING_ENV)."""
    from commsched.runtime.resource_hook import env_overrides

    names = [
        "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NTHREADS",
        "NCCL_LL128_NTHREADS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_TUNER_PLUGIN",
    ]
    env = {name: f"v{i}" for i, name in enumerate(names)} | {"NCCL_DEBUG": "INFO", "NCCL_ALGOX": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    lines = env_overrides(env)
    assert sorted(line.split("=")[0] for line in lines) == sorted(names)
    for line in lines:
        name = line.split("=")[0]
        assert line.startswith(f"{name}={env[name]} is set: it ") and "src/" in line  # says what it does, and where
    said = {line.split("=")[0]: line for line in lines}
    assert "threads per block" in said["NCCL_NTHREADS"] and "LL128" in said["NCCL_LL128_NTHREADS"]
    assert "min_ctas" in said["NCCL_MIN_CTAS"] and "max_ctas" in said["NCCL_MAX_CTAS"]
    assert "algorithms" in said["NCCL_ALGO"] and "protocols" in said["NCCL_PROTO"] and "plugin" in said["NCCL_TUNER_PLUGIN"]
    # set but empty: NCCL reads nothing from it (src/misc/param.cc:93, src/graph/tuning.cc:60 strtok_r)
    assert env_overrides({"NCCL_MIN_CTAS": "", "NCCL_ALGO": ""}) == []
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


# --- one rank in this process (gloo, HashStore): the decisions, with torch's real strings ---

CONFIGS = ({"blocks": 1, "threads_per_block": 64}, None, {"blocks": 3, "threads_per_block": 256}, {"blocks": 1, "threads_per_block": 64})


@pytest.fixture
def one_rank():
    """A one-rank process group here; ``start(backend)`` makes it (None: no backend given)."""
    import torch.distributed as dist

    assert not dist.is_initialized()

    def start(backend):
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def _model_and_plan():
    from torch import nn

    from commsched.types import Bucket, Plan

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    names = [n for n, _ in model.named_parameters()]  # 0.weight 0.bias 2.weight 2.bias
    groups = ((names[3], names[2]), (names[1],), (names[0],))
    resources = (CONFIGS[0], None, CONFIGS[2])
    size = {n: p.numel() * 4 for n, p in model.named_parameters()}
    plan = Plan("joint", "mlp", tuple(Bucket(g, sum(size[n] for n in g), r) for g, r in zip(groups, resources)))
    return model, plan


def test_cuda_backend_is_read_from_the_backend_config():
    from commsched.runtime.resource_hook import cuda_backend, device_backend

    assert cuda_backend("cuda:nccl") == "nccl"  # init_process_group() on a GPU in torch 2.14, and "nccl"
    assert cuda_backend("cpu:gloo,cuda:nccl") == "nccl"
    assert cuda_backend("CPU:gloo, cuda:NCCL") == "nccl"
    assert cuda_backend("cpu:gloo,cuda:gloo") == "gloo"
    assert cuda_backend("cpu:gloo") is None  # init_process_group() without a GPU
    assert cuda_backend("undefined") is None and cuda_backend("") is None
    assert device_backend("cpu:gloo,cuda:nccl", "cpu") == "gloo" and device_backend("cuda:nccl", "cpu") is None


def test_get_backend_names_the_init_string_not_what_serves_cuda(one_rank):
    """What torch really returns: get_backend() is the string given to init_process_group ("undefined"
    for none); the backend config is what new groups and collectives use."""
    import torch.distributed as dist

    from commsched.runtime.resource_hook import cuda_backend

    one_rank(None)
    assert dist.get_backend() == "undefined"
    assert cuda_backend(dist.get_backend_config()) == ("nccl" if torch.cuda.is_available() else None)
    dist.destroy_process_group()
    one_rank("cpu:gloo,cuda:gloo")
    assert dist.get_backend() == "cpu:gloo,cuda:gloo" and cuda_backend(dist.get_backend_config()) == "gloo"


@pytest.mark.parametrize(
    "given, config",
    [
        ("undefined", "cuda:nccl"),  # init_process_group() on a GPU (torch 2.14 BackendConfig of "undefined")
        ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"),  # a mixed group
    ],
)
def test_nccl_limits_follow_the_backend_that_serves_cuda(one_rank, monkeypatch, given, config):
    """The group reports ``given`` from get_backend() and ``config`` from get_backend_config(), as torch
    does for these init strings on a GPU machine (no NCCL group can be made here, so new_group is
    recorded and answered with a gloo group): each config's group gets NCCL options with min_ctas =
    max_ctas = its blocks, and the NCCL variables set are warned about."""
    import warnings

    import torch.distributed as dist

    from commsched.runtime.resource_hook import resource_routing

    one_rank("gloo")
    real_new_group = dist.new_group
    made = []

    def new_group(ranks=None, backend=None, pg_options=None, **kw):
        made.append((backend, pg_options))
        return real_new_group(ranks=ranks, backend="gloo")

    monkeypatch.setattr(dist, "get_backend", lambda group=None: given)
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: config)
    monkeypatch.setattr(dist, "new_group", new_group)
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    model, plan = _model_and_plan()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        routing = resource_routing(plan, model)
    assert [b for b, _ in made] == [given, given]  # the groups mirror the parent's backend string
    assert all(isinstance(o, dist.ProcessGroupNCCL.Options) for _, o in made), made
    assert [(o.config.min_ctas, o.config.max_ctas) for _, o in made] == [(1, 1), (3, 3)]  # by threads, then blocks
    said = [str(w.message) for w in caught]
    assert any("NCCL_ALGO=Ring is set" in m for m in said), said
    assert not any("not applied" in m for m in said), said
    assert routing.cuda_backend == "nccl"


@pytest.mark.parametrize("backend", ["gloo", None])
def test_blocks_dropped_on_a_backend_other_than_nccl_are_a_warning(one_rank, backend):
    """On gloo (and with no backend on a machine without CUDA) the CTA limits cannot apply: said once."""
    import torch.distributed as dist

    from commsched.runtime.resource_hook import resource_routing

    if backend is None and torch.cuda.is_available():
        pytest.skip("with a GPU, init_process_group() serves CUDA with NCCL")
    one_rank(backend)
    model, plan = _model_and_plan()
    with pytest.warns(UserWarning, match="not applied") as caught:
        routing = resource_routing(plan, model)
    (line,) = [str(w.message) for w in caught if "not applied" in str(w.message)]
    assert repr(dist.get_backend_config()) in line
    assert len(routing.groups) == 2


def test_a_plan_without_resources_warns_nothing_on_gloo(one_rank):
    import dataclasses
    import warnings

    from commsched.runtime.resource_hook import resource_routing

    one_rank("gloo")
    model, plan = _model_and_plan()
    plan = dataclasses.replace(plan, buckets=tuple(dataclasses.replace(b, resources=None) for b in plan.buckets))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        routing = resource_routing(plan, model)
    assert routing.groups == {} and routing.warmed == ()


def test_each_group_is_warmed_up_when_the_routing_is_built(one_rank, monkeypatch):
    """Before any step: one all-reduce per (config, size) of the plan's buckets, on that config's group,
    on the parameters' device, of zeros (issue 31 item 1, second bullet)."""
    import warnings

    import torch.distributed as dist

    from commsched.runtime.resource_hook import config_key, resource_routing

    one_rank("gloo")
    real = dist.all_reduce
    calls = []

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append((group, tensor.numel(), tensor.device.type, tensor.dtype, bool(tensor.eq(0).all())))
        return real(tensor, op=op, group=group, async_op=async_op)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    model, plan = _model_and_plan()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gloo: the blocks are not applied
        routing = resource_routing(plan, model)
    numel = {n: p.numel() for n, p in model.named_parameters()}
    configured = sorted((b for b in plan.buckets if b.resources), key=lambda b: (b.resources["threads_per_block"], b.resources["blocks"]))
    want = [(config_key(b.resources), sum(numel[n] for n in b.tensors)) for b in configured]
    assert calls == [(routing.groups[k], n, "cpu", torch.float32, True) for k, n in want]
    assert [(w.config, w.numel, w.device) for w in routing.warmed] == [(k, n, "cpu") for k, n in want]


class _CudaBuffer:
    """A bucket buffer that says it lives on CUDA (what the hook reads to decide), for a CPU test."""

    is_cuda = True
    device = torch.device("cuda", 0)

    def div_(self, _):
        return self


class _Bucket:
    def __init__(self, index, params, buffer):
        self._index, self._params, self._buffer = index, params, buffer

    def index(self):
        return self._index

    def parameters(self):
        return self._params

    def buffer(self):
        return self._buffer


def test_serialising_is_decided_where_the_bucket_lives_when_it_is_reduced(one_rank, monkeypatch):
    """The routing is built while the module is on the CPU; a bucket whose buffer is on CUDA when it
    is reduced still goes through the side stream (issue 31 item 1, second bullet), and a CPU bucket
    does not."""
    import warnings

    from commsched.runtime import resource_hook as hook

    one_rank("gloo")
    model, plan = _model_and_plan()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        routing = hook.resource_routing(plan, model)
    launched = []

    def launch_after(state, buffer, group):
        launched.append((buffer, group))
        fut = torch.futures.Future()
        fut.set_result([buffer])
        return fut

    monkeypatch.setattr(hook, "_launch_after", launch_after)
    params = dict(model.named_parameters())
    first = [params[n] for n in plan.buckets[0].tensors]
    cuda_buffer = _CudaBuffer()
    assert hook.resource_hook(routing, _Bucket(0, first, cuda_buffer)).wait() is cuda_buffer
    assert launched == [(cuda_buffer, routing.groups[hook.config_key(plan.buckets[0].resources)])]
    assert routing._previous is not None  # the next CUDA bucket waits for this one
    cpu_buffer = torch.ones(sum(p.numel() for p in first))
    assert torch.equal(hook.resource_hook(routing, _Bucket(0, first, cpu_buffer)).wait(), torch.ones_like(cpu_buffer))
    assert len(launched) == 1


def test_ddp_checks_the_plan_on_the_device_the_group_serves(one_rank, monkeypatch):
    """commsched.DataParallel's plan check: init_process_group() on a GPU serves only CUDA
    (config ``cuda:nccl``, get_backend() ``undefined``), so its all-gather must be on CUDA."""
    import torch.distributed as dist
    from torch import nn

    from commsched.runtime.data_parallel import _comm_device

    one_rank("gloo")
    assert _comm_device(dist.group.WORLD, nn.Linear(2, 2)) == torch.device("cpu")
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "undefined")
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: "cuda:nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert _comm_device(dist.group.WORLD, nn.Linear(2, 2)) == torch.device("cuda", 0)
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: "cpu:gloo,cuda:nccl")
    assert _comm_device(dist.group.WORLD, nn.Linear(2, 2)) == torch.device("cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["nccl", "default", "cpu:gloo,cuda:nccl"])
def test_on_a_gpu_every_way_to_get_nccl_limits_the_ctas_and_makes_communicators_before_the_first_step(backend):
    """init_process_group("nccl"), init_process_group() and init_process_group("cpu:gloo,cuda:nccl"):
    each config's group is NCCL with min_ctas = max_ctas = its blocks, its communicator exists right
    after resource_routing (before the first step), and the gradients equal stock DDP's."""
    world = min(2, torch.cuda.device_count())
    docs = results(run_workers("resource_hook.py", [backend], world=world, timeout_s=300))
    for doc in docs:
        assert doc["cuda_backend"] == "nccl", doc["backend_config"]
        assert doc["max_rel_diff"] <= (0.0 if world <= 2 else 1e-6)
        assert doc["max_rel_diff_commsched"] <= (0.0 if world <= 2 else 1e-6)
        configs = [tuple(c) if c is not None else None for c in doc["configs"]]
        for step in doc["steps"][1:]:  # the plan's buckets in order, as on gloo
            assert [entry[1] for entry in step] == list(range(len(configs)))
        assert doc["groups_before_step"], "the plan has configs: there are groups"
        for key, entry in doc["groups_before_step"].items():
            blocks = eval(key)[0]
            assert entry["ctas"] == [blocks, blocks], (key, entry)
            if "initialized" in entry:  # ProcessGroupNCCL._is_initialized (torch 2.14 has it)
                assert entry["initialized"], (key, entry)
        assert {w[2] for w in doc["warmed"]} == {f"cuda:{doc['rank']}"}
