"""What ``validate`` measures on the process group (torch): the probes, the cost benchmark, the steps.

Every function and class here runs on every rank in lockstep (collectives inside). What they
measure is handed as plain numbers to the pure fits of :mod:`commsched.calibrate`.

Every model here shares one copy of the parameters (:class:`SharedWeights`): the profile steps, the
probe's passes, the launch passes and every variant's stock DDP are modules of their own (their own
``Parameter`` objects, so each DDP's reducer hooks only its own) over the same storage, with the
same SGD momentum buffers. What each model costs beyond them is its DDP reducer's buckets (one
gradient copy) and, while it runs, its gradients; a strategy's DDP (:class:`Variant`) lives only for
its turn.
"""

from __future__ import annotations

import copy
import gc
import inspect
import statistics
import time
import warnings
import weakref

import torch
import torch.distributed as dist
from torch import nn

from commsched.calibrate.cost_table import GAIN_SIZES, LONG_MESSAGE_MAX_BYTES, MIB, chain_calls, chain_length, probe_sizes
from commsched.calibrate.launch import mid_pass_planner
from commsched.cost.models import Table
from commsched.errors import CommschedError
from commsched.models.inputs import Inputs, call_with
from commsched.planners import WFBP, SyncEASGD, make_plan
from commsched.runtime.bench_comm import CommSamples
from commsched.sim.semantics import GLOO_DEFAULT_THREADS
from commsched.types import ModelProfile, Plan

# a plan's buckets need no costs for the planners used here (one bucket; a bucket per gradient; DDP's caps)
_NO_COSTS = Table((1, 2), (1.0, 1.0))


# --- the process group ----------------------------------------------------------------------------


def runtime_threads(group=None) -> int:
    """How many collectives the process group runs at once: gloo's worker threads (read from the
    backend's options), 1 for NCCL (one stream per communicator)."""
    if dist.get_backend(group) != "gloo":
        return 1
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return int(pg._get_backend(torch.device("cpu")).options._threads)
    except (AttributeError, RuntimeError) as e:  # a private API: say so, and use torch 2.14's default
        warnings.warn(f"could not read gloo's thread count ({e}); assuming {GLOO_DEFAULT_THREADS}", stacklevel=2)
        return GLOO_DEFAULT_THREADS


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _launch_chain(buffers: list[torch.Tensor]):
    """Launch one all-reduce per buffer back to back, as DDP's reducer launches ready buckets; the
    returned list receives the time the last one completed (stamped by its completion callback)."""
    done: list[float] = []
    works = [dist.all_reduce(b, async_op=True) for b in buffers]
    stamped = works[-1].get_future().then(lambda _f: done.append(time.perf_counter()))
    return works, stamped, done


def _chain_s(buffers: list[torch.Tensor]) -> float:
    t0 = time.perf_counter()
    works, stamped, done = _launch_chain(buffers)
    for w in works:
        w.wait()
    stamped.wait()
    return done[0] - t0


def _max_over_ranks(values: list[float], op=dist.ReduceOp.MAX) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()



def bench_chains(sizes_bytes: tuple[int, ...], repeats: int) -> CommSamples:
    """All-reduce time per call as the runtime issues it (module docstring, step 2).

    ``time_s`` is per size the slowest rank's median over ``repeats`` chains of the chain's time
    per call. Within a chain the time is a mean over its calls (a plan's buckets pay the mean, and
    on this project's 2-core machines per-call times are bimodal, an answer at once or after a
    scheduler tick); over chains the median (``statistic`` "median"), since what is predicted is a
    median step, and a median step does not pay a chain that stalled: googlenet's cost table once
    had 16 MiB at 90 ms, the mean of four chains averaging 73 ms and one of 160 ms, where every other
    size went at the link's 239 MB/s; that one point put its buckets of 13-18 MB 10-18 ms too slow and
    its 7-bucket plans 8% (BENCHMARKS.md). ``min_s``/``max_s`` the fastest and slowest chain's
    per-call time on any rank. Every rank must call it with the same arguments.
    """
    sizes = tuple(sorted(set(sizes_bytes)))
    if not sizes or any(s <= 0 or s % 4 for s in sizes):
        raise CommschedError(f"chain sizes must be positive multiples of 4 bytes, got {list(sizes_bytes)}")
    device = _comm_device()
    medians, lows, highs = [], [], []
    for s in sizes:
        k = chain_length(s)
        bufs = [torch.zeros(s // 4, device=device) for _ in range(k)]
        _chain_s(bufs)  # warm-up: first touch of the buffers
        dist.barrier()
        per_call = [_chain_s(bufs) / k for _ in range(repeats)]
        medians.append(statistics.median(per_call))
        lows.append(min(per_call))
        highs.append(max(per_call))
    return CommSamples(
        dist.get_backend(), dist.get_world_size(), sizes,
        tuple(_max_over_ranks(medians)), tuple(_max_over_ranks(lows, dist.ReduceOp.MIN)), tuple(_max_over_ranks(highs)),
        statistic="median",
    )



def gather(obj) -> list:
    """Every rank's ``obj``, in rank order (on every rank)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_obj(obj):
    """Rank 0's ``obj`` on every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def pooled(per_rank: list[list]) -> list:
    """One list of every rank's items, rank 0's first."""
    return [x for xs in per_rank for x in xs]


# --- the models -----------------------------------------------------------------------------------


class SharedWeights:
    """One copy of a model's parameters that every model of a run trains and measures, with one set
    of SGD momentum buffers and the weights they started from.

    :meth:`module` makes a module over the same parameter storage (its own ``Parameter`` objects:
    a DDP wrapping it hooks only those), :meth:`optimizer` an SGD over such a module whose momentum
    buffers are the shared ones, and :meth:`reset` puts the weights back where they started and the
    momentum to zero. The step times do not depend on the weights' values; the models share them
    so that a run holds one copy of the weights and one of the momentum whatever the number of
    strategies (before, each of them held its own of both, and its gradients between its turns:
    ``validate --model resnet152`` with five strategies grew to 11.9 GB per rank).

    The copies are ``copy.deepcopy``'s, the parameters mapped to their new objects. An attribute
    deepcopy cannot copy (a ``threading.Lock``, a tensor autograd made and the model kept) is shared
    by every copy instead. A loss function that uses the model's own parameters (CLIP's logit
    scale, an ``lm_head`` applied in the loss), or a hook closed over the model, reaches the
    original's, which no DDP reduces: :meth:`route_loss` finds that and :meth:`module_with_loss`
    then sends each copy's forward and loss to that copy's parameters.
    """

    def __init__(self, base: nn.Module, lr: float, name: str = "the model") -> None:
        self.base = base
        self.lr = lr
        self.name = name
        self.params = list(base.parameters())
        with torch.no_grad():
            self.initial = [p.detach().clone() for p in self.params]
        self.momentum = [torch.zeros_like(p) if p.requires_grad else None for p in self.params]
        self._shared_attrs: dict[int, object] = {}  # what deepcopy cannot copy (:meth:`_uncopyable`)
        self.routed = False  # the loss reaches the model's own parameters (:meth:`route_loss`)

    def module(self) -> nn.Module:
        """A copy of the model (its own buffers) whose parameters share this storage."""
        for attempt in range(2):
            memo = {id(p): _twin(p) for p in self.params}
            try:
                made = copy.deepcopy(self.base, {**memo, **self._hooks(), **self._shared_attrs})
            except Exception as e:  # noqa: BLE001 - the user's attributes raise what they raise
                if attempt:
                    raise CommschedError(
                        f"validate trains copies of {self.name} (copy.deepcopy over its weights) and cannot copy it: "
                        f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                    ) from e
            else:
                # every DDP of the run hooks its copy's parameters: copies that share them (a
                # __deepcopy__ returning the model) would reduce every gradient once per DDP
                if not {id(q) for q in made.parameters()}.isdisjoint(id(p) for p in self.params):
                    raise CommschedError(
                        f"validate trains copies of {self.name}, and copy.deepcopy of it keeps the model's own parameters "
                        f"(a __deepcopy__ of {type(self.base).__name__} returning the model, say): the copies' DDPs would each reduce them"
                    )
                return made
            # found again at each failure: the model's own forward (run by a routed loss) may have
            # replaced one (a tensor it keeps from its last call)
            self._shared_attrs = self._uncopyable()
        raise AssertionError("unreachable")

    def _uncopyable(self) -> dict[int, object]:
        """The model's attributes that deepcopy fails on, by id (a deepcopy memo: the copies share
        them). Of a dict (a module's hooks), the items that fail, so that each copy has its own."""
        params = {id(p): p for p in self.params}

        def copies(value, shared: dict) -> bool:
            try:
                copy.deepcopy(value, {**params, **shared})
            except Exception:  # noqa: BLE001 - whatever it raises, the copies share it
                return False
            return True

        # the model's own modules and parameters are the copy's to make: a back-reference to one
        # that fails (an owner holding a lock) fails for what it reaches, found in its turn
        own = {id(m) for m in self.base.modules()} | set(params)
        found: dict[int, object] = {}
        grew = True
        while grew:  # until nothing more is found: each value tried with what is shared so far
            grew = False
            for m in self.base.modules():
                # a buffer autograd made (register_buffer of a computed tensor): shared, as an attribute is
                values = [b for b in m._buffers.values() if b is not None]
                values += [v for k, v in vars(m).items() if k not in ("_parameters", "_buffers", "_modules")]
                for value in values:
                    if id(value) in own or id(value) in found or copies(value, found):
                        continue
                    grew = True
                    if isinstance(value, dict):
                        items = {id(v): v for v in value.values() if id(v) not in own and not copies(v, found)}
                        if copies(value, {**found, **items}):
                            found.update(items)
                            continue
                    found[id(value)] = value
        return found

    def _hooks(self) -> dict[int, object]:
        """The model's hooks that are not its own modules' methods, by id (a deepcopy memo): shared
        by the copies, as functions are. A hook object keeping what it saw (the features a loss
        reads from it) is then the one the loss holds, not a copy of it."""
        own = {id(m) for m in self.base.modules()}
        shared: dict[int, object] = {}
        for m in self.base.modules():
            for key, value in vars(m).items():
                if key.endswith("hooks") and isinstance(value, dict):
                    for hook in value.values():
                        bound_to = getattr(hook, "__self__", None)
                        if id(hook) not in own and id(bound_to) not in own:
                            shared[id(hook)] = hook
        return shared

    def route_loss(self, inputs: Inputs, loss_fn) -> None:
        """Whether the loss, or a hook of the model's, uses the model's own parameters beside its
        output: one forward and backward pass of a copy, then of a routed copy
        (:meth:`module_with_loss`). An error names the parameters still reached (a ``Parameter``
        the loss holds itself, not through the model), which no copy can be given. Every rank runs
        it alike (no collectives)."""
        if not self._reached(self.module(), loss_fn, inputs):
            return
        self.routed = True
        held = self._reached(*self.module_with_loss(loss_fn), inputs=inputs)
        if held:
            raise CommschedError(
                f"the loss function of {self.name} (or a hook of its model) uses {len(held)} parameter(s) of the model "
                f"it was given directly ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}): validate trains copies "
                "of the model, and a loss or hook can be sent to a copy's parameters only where it reaches them through "
                "the model (model.logit_scale, model.lm_head(x)), not as Parameter objects of its own"
            )

    def _reached(self, model: nn.Module, loss_fn, inputs: Inputs) -> list[str]:
        """The original's parameters that a step of ``model`` (forward, ``loss_fn``, backward) gave a gradient."""
        self.base.zero_grad(set_to_none=True)
        loss_fn(call_with(model, inputs)).backward()
        release_grads(model)
        names = [n for n, p in self.base.named_parameters() if p.grad is not None]
        self.base.zero_grad(set_to_none=True)
        return names

    def module_with_loss(self, loss_fn) -> tuple[nn.Module, object]:
        """A :meth:`module` and the loss function to train it with: ``loss_fn`` itself, or where the
        loss or a hook uses the model's own parameters (:meth:`route_loss`), a copy whose forward
        and loss run with the original's parameters swapped for the copy's (a loss or hook that
        reaches ``model.logit_scale`` reaches the copy's)."""
        model = self.module()
        if not self.routed:
            return model, loss_fn
        pairs = []  # a deepcopy: the two models' modules pair up in order
        for (name, mine), (other, theirs) in zip(self.base.named_modules(), model.named_modules()):
            if name != other:
                raise CommschedError(f"a copy of {self.name} has module {other!r} where the model has {name!r}")
            pairs += [(mine._parameters, k, p) for k, p in theirs._parameters.items() if p is not None]
        saved: list[tuple] = []
        depth = [0]  # a forward inside the forward or the loss (the model calling itself) nests

        def swap(*_) -> None:
            depth[0] += 1
            if depth[0] == 1:
                saved.extend((d, k, d[k]) for d, k, _ in pairs)
                for d, k, p in pairs:
                    d[k] = p

        def restore(*_) -> None:
            depth[0] -= 1
            if depth[0] == 0:
                for d, k, p in saved:
                    d[k] = p
                saved.clear()

        # the copy's own hook dicts, whatever it shares with the model (swap and restore are this copy's)
        for key in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called"):
            if getattr(model, key) is getattr(self.base, key):
                setattr(model, key, type(getattr(model, key))(getattr(model, key)))
        # first before the model's own pre-hooks, last after its hooks (and after an error too)
        model.register_forward_pre_hook(swap, prepend=True)
        model.register_forward_hook(restore, always_call=True)

        def routed(out):
            swap()
            try:
                return loss_fn(out)
            finally:
                restore()

        return model, routed

    def optimizer(self, module: nn.Module) -> torch.optim.SGD:
        """SGD (momentum 0.9) over ``module``'s trainable parameters (a :meth:`module`), with the shared
        momentum buffers (SGD updates them in place)."""
        pairs = [(q, m) for q, m in zip(module.parameters(), self.momentum) if q.requires_grad]
        opt = torch.optim.SGD([q for q, _ in pairs], lr=self.lr, momentum=0.9)
        for q, m in pairs:
            opt.state[q]["momentum_buffer"] = m
        return opt

    def reset(self) -> None:
        """The weights as they started, the momentum zero."""
        with torch.no_grad():
            for p, w in zip(self.params, self.initial):
                p.copy_(w)
            for m in self.momentum:
                if m is not None:
                    m.zero_()

    @property
    def param_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)


def _twin(p: nn.Parameter) -> nn.Parameter:
    """A parameter over ``p``'s storage, as ``Parameter.__deepcopy__`` makes one (its class: a
    subclass stays one) but not cloned, with ``p``'s attributes (a quantisation state, a tag a hook
    reads) and its gradient hooks."""
    try:
        q = type(p)(p.data, p.requires_grad)
    except Exception:  # noqa: BLE001 - a subclass whose constructor takes other arguments
        q = None
    if q is None or q.data_ptr() != p.data_ptr():  # a constructor that copied would give the copy weights of its own
        q = nn.Parameter(p.data, requires_grad=p.requires_grad)
    hooks = ("_backward_hooks", "_post_accumulate_grad_hooks")
    q.__dict__.update({k: v for k, v in vars(p).items() if k not in hooks})
    if q.requires_grad:  # a frozen parameter's hooks never fire (and torch refuses them)
        for hook in (getattr(p, "_backward_hooks", None) or {}).values():
            q.register_hook(hook)
        for hook in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values():
            q.register_post_accumulate_grad_hook(hook)
    return q


def release_grads(module: nn.Module) -> None:
    """The gradients of ``module`` freed (its next step allocates them again, as after
    ``zero_grad(set_to_none=True)``)."""
    for p in module.parameters():
        p.grad = None


def activation_bytes(model: nn.Module, inputs: Inputs, loss_fn) -> int:
    """Bytes one forward pass of ``model`` on ``inputs`` keeps for its backward pass: the tensors
    autograd saves, each storage once, the parameters left out (they are counted as model copies)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, say): not counted
            return t
        if s.data_ptr() not in params:
            saved[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(call_with(model, inputs))
    del loss
    return sum(saved.values())


# --- probes: contention and concurrency -----------------------------------------------------------


class LightStamps:
    """The end of forward and the ready times of the last few gradients of a DDP model's steps,
    from one forward hook and post-accumulate hooks on the last ``LAST`` tensors of the ready order
    (the last one to be ready can vary): a step stamped without a recorder's cost per gradient and
    per bucket."""

    LAST = 4

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, names: tuple[str, ...]) -> None:
        self.forward_end = 0.0
        self.ready: list[float] = []
        ddp.register_forward_hook(lambda *_: setattr(self, "forward_end", time.perf_counter()))
        params = dict(ddp.module.named_parameters())
        for name in names[-self.LAST :]:
            params[name].register_post_accumulate_grad_hook(lambda _p: self.ready.append(time.perf_counter()))

    def since(self, t0: float) -> tuple[float, float]:
        """(end of forward, last gradient) of the step just run, seconds since ``t0``."""
        return self.forward_end - t0, max(self.ready, default=self.forward_end) - t0


class LaunchSteps:
    """Stock DDP with a fixed plan, *not* recorded: one bucket per gradient (``wfbp``'s plan, the
    default) or ``planner``'s. What launching buckets from the backward pass costs compute (the
    semantics' ``launch_compute_s``) and how fast they go under compute beside the chains
    (``launch_factor_points``, by size from two such passes), fitted by
    :func:`commsched.calibrate.launch.launch_costs`. Not recorded because the recorder's per-bucket
    calls cost more than what is measured here: on densenet121's 364 buckets a recorded step took
    15% longer than the same DDP instance's unrecorded one (``benchmarks/overhead.py densenet121 8
    64 8 wfbp``, BENCHMARKS.md). Only :class:`LightStamps` stamp it.
    :meth:`sample` runs one forward and backward pass (no optimizer) and returns, each the slowest
    rank's: (seconds from the end of the forward pass to the last gradient, seconds from it to the
    return of ``backward()`` (every bucket reduced and the gradients copied back), the buckets
    launched while compute had work left). ``model`` is used as it is (give it a
    :meth:`SharedWeights.module`); the gradients are freed after each pass."""

    def __init__(self, order: ModelProfile, model: nn.Module, inputs: Inputs, loss_fn, planner=None) -> None:
        from commsched.runtime.data_parallel import ddp_options

        self.model = model
        plan = make_plan(planner or WFBP(), order, _NO_COSTS)
        self.ddp = nn.parallel.DistributedDataParallel(self.model, **ddp_options(plan, self.model))
        self.inputs, self.loss_fn = inputs, loss_fn
        # the last gradient's bucket is launched after compute: the others while it had work left
        self.launched_under_compute = max(0, len(plan.buckets) - 1)
        self.stamps = LightStamps(self.ddp, order.names)
        for _ in range(2):  # the first builds DDP's buckets in ready order
            self.sample()

    def sample(self) -> tuple[float, float, int]:
        self.ddp.zero_grad(set_to_none=True)
        self.stamps.ready.clear()
        dist.barrier()  # before the forward, as in training
        t0 = time.perf_counter()
        self.loss_fn(call_with(self.ddp, self.inputs)).backward()
        done = time.perf_counter()
        release_grads(self.model)
        mine = (*self.stamps.since(t0), done - t0)
        # since the barrier, the slowest rank's, as the profile's times: a rank whose forward ended
        # early waits for the other's gradients, so its own pass is not the step's
        forward, last, end = (max(x[i] for x in gather(mine)) for i in range(3))
        return last - forward, end - forward, self.launched_under_compute


class Probe:
    """One :meth:`sample` measures, interleaved so that drift hits them alike (every rank in lockstep):

    - a backward pass alone, and one with a long all-reduce launched at its start (compute slowdown
      c: the message is sized from the cost table to outlast the backward pass, capped at
      ``LONG_MESSAGE_MAX_BYTES``; when it ends first, compute was slowed only until then, which the
      fit accounts for, and the sample is counted in ``long_message_ended_early``);
    - with more than one runtime thread, a backward pass with two such all-reduces launched at its
      start (compute slowdown c2 while both are in flight);
    - for each probe size b (:func:`~commsched.calibrate.cost_table.probe_sizes`): a chain of k
      all-reduces alone, and the same chain launched at the start of a backward pass (k sized so
      the chain takes about a third of the backward pass, at least one call: the largest size's one
      call may outlast the pass, which :func:`~commsched.calibrate.launch.chain_factor` accounts for;
      :func:`~commsched.calibrate.cost_table.chain_calls`);
    - for each gain size: one all-reduce alone and two launched together;
    - at each probe size, the cost table's own measurement (:func:`bench_chains`' chain), so the
      table measured before the rounds can be brought to the rounds' minutes
      (:func:`~commsched.calibrate.cost_table.drifted`);
    - with ``launches`` (:class:`LaunchSteps`: one bucket per gradient, and
      :func:`~commsched.calibrate.launch.mid_pass_planner`'s), one pass of each: what launching
      buckets from the backward pass costs compute and how fast they go under compute by size
      (:func:`~commsched.calibrate.launch.launch_costs`).

    Each forward runs first, untimed, and ranks meet at a barrier before each timed part. ``model``
    is used as it is (give it a :meth:`SharedWeights.module`); its gradients are freed after each sample.
    """

    def __init__(
        self, model: nn.Module, inputs: Inputs, loss_fn, cost: Table, max_bytes: int, launches: tuple[LaunchSteps, ...] = ()
    ) -> None:
        self.model, self.inputs, self.loss_fn = model, inputs, loss_fn
        self.launches = launches
        self._backward(self._forward())
        backward = max(_max_over_ranks([statistics.median(self._backward(self._forward()) for _ in range(3))]))
        release_grads(self.model)
        per_byte = max(cost.time_s(64 * MIB) - cost.time_s(MIB), 1e-12) / (63 * MIB)
        device = _comm_device()
        self.long_msg = torch.zeros(int(min(max(3.0 * backward / per_byte, MIB), LONG_MESSAGE_MAX_BYTES)) // 4, device=device)
        self.second_msg = torch.zeros_like(self.long_msg) if runtime_threads() > 1 else None
        self.sizes = probe_sizes(max_bytes)
        self.chains = {s: [torch.zeros(s // 4, device=device) for _ in range(chain_calls(s, backward, cost.time_s(s)))] for s in self.sizes}
        self.pairs = {s: [torch.zeros(s // 4, device=device) for _ in range(2)] for s in GAIN_SIZES}
        # the cost table's own measurement (chains of chain_length) at the probe sizes, every round
        self.anchors = {s: [torch.zeros(s // 4, device=device) for _ in range(chain_length(s))] for s in self.sizes}
        self.ended_early = 0

    def _forward(self) -> torch.Tensor:
        # gradients set to None first, as the training steps' optimizer does: a backward pass into
        # existing gradients adds into them, and on alexnet (233 MiB of gradients) the probe's
        # passes took 816 ms against the training steps' 509, which put compute's slowdown under
        # an all-reduce at c = 0.09 against 0.31 before the rounds, and its plans 5-11% short
        # (BENCHMARKS.md)
        self.model.zero_grad(set_to_none=True)
        return self.loss_fn(call_with(self.model, self.inputs))

    def _backward(self, loss: torch.Tensor) -> float:
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    @property
    def buffer_bytes(self) -> int:
        """The bytes of the messages this probe holds."""
        bufs = [self.long_msg, *([self.second_msg] if self.second_msg is not None else [])]
        bufs += [b for group in (*self.chains.values(), *self.pairs.values(), *self.anchors.values()) for b in group]
        return sum(b.numel() * b.element_size() for b in bufs)

    def sample(self) -> dict:
        out: dict = {}
        loss = self._forward()
        dist.barrier()
        out["backward_s"] = self._backward(loss)
        loss = self._forward()
        dist.barrier()
        t0 = time.perf_counter()
        works, stamped, done = _launch_chain([self.long_msg])
        out["backward_under_allreduce_s"] = self._backward(loss)
        works[0].wait()
        stamped.wait()
        # compute was slowed only while the all-reduce was in flight: until it ended, if it ended first
        out["overlap_s"] = min(done[0] - t0, out["backward_under_allreduce_s"])
        self.ended_early += done[0] - t0 < out["backward_under_allreduce_s"]
        if self.second_msg is not None:  # two at once (gloo's threads): compute's slowdown c2
            loss = self._forward()
            dist.barrier()
            ends: list[float] = []
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, async_op=True) for b in (self.long_msg, self.second_msg)]
            stamped = [w.get_future().then(lambda _f: ends.append(time.perf_counter())) for w in works]
            under = self._backward(loss)
            for w, f in zip(works, stamped):
                w.wait()
                f.wait()
            out["backward_under_two_s"] = under
            out["overlap_two_s"] = min(min(ends) - t0, under)  # both in flight
            out["overlap_any_s"] = min(max(ends) - t0, under)  # at least one
        for s, bufs in self.chains.items():
            dist.barrier()
            alone = _chain_s(bufs) / len(bufs)
            loss = self._forward()
            dist.barrier()
            t0 = time.perf_counter()
            works, stamped, done = _launch_chain(bufs)
            under = self._backward(loss)
            for w in works:
                w.wait()
            stamped.wait()
            # per call alone, per call under compute, that backward pass, calls
            out[f"chain_{s}"] = (alone, (done[0] - t0) / len(bufs), under, len(bufs))
        release_grads(self.model)
        for s, bufs in self.anchors.items():
            dist.barrier()
            out[f"anchor_{s}"] = _chain_s(bufs) / len(bufs)
        for s, (a, b) in self.pairs.items():
            dist.barrier()
            one = _chain_s([a])
            dist.barrier()
            out[f"pair_{s}"] = (one, _chain_s([a, b]))
        for key, launches in zip(("launch_pass", "launch_pass_mid"), self.launches):
            out[key] = launches.sample()
        return out

    def info(self) -> dict:
        """What the report's ``contention`` carries beside the fitted numbers: the long message's
        bytes, the calls per probe chain, and how many of this rank's samples so far had the long
        all-reduce end before the backward pass."""
        return {
            "long_message_bytes": self.long_msg.numel() * 4,
            "chain_calls": {str(s): len(b) for s, b in self.chains.items()},
            "long_message_ended_early": self.ended_early,  # this rank's count so far
        }


# --- the compute profile and the variants' steps --------------------------------------------------


class ProfileStepRunner:
    """Training steps that measure the compute profile as training sees it: stock DDP with one
    bucket (SyncEASGD's plan), recorded per tensor. :meth:`step` runs one step and, with ``keep``,
    keeps its record and optimizer time; :meth:`take` hands over (and forgets) what was kept.
    :meth:`light_step` runs one with the recorder paused, stamped only by :class:`LightStamps`:
    the recorder's hook on every gradient lengthens the backward pass (densenet121's 364 hooks: its
    one-bucket plan, these steps' own, was predicted 3-6% slow), so the profile's backward times
    are scaled to the light steps' length (:meth:`take_light`; :class:`commsched.calibrate.ProfileSteps`).
    ``shared`` gives the model and the optimizer's momentum; the gradients are freed after each step."""

    def __init__(self, order: ModelProfile, shared: SharedWeights, inputs: Inputs, loss_fn) -> None:
        from commsched.runtime.data_parallel import ddp_options
        from commsched.runtime.record import StepRecorder

        self.model, self.loss_fn = shared.module_with_loss(loss_fn)
        plan = make_plan(SyncEASGD(), order, _NO_COSTS)
        self.ddp = nn.parallel.DistributedDataParallel(self.model, **ddp_options(plan, self.model))
        self.recorder = StepRecorder(self.ddp, order=order.names)
        self.opt = shared.optimizer(self.model)
        self.inputs = inputs
        self._kept: list[tuple] = []
        self._light: list[tuple[float, float]] = []
        self.stamps = LightStamps(self.ddp, order.names)

    def step(self, keep: bool) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(call_with(self.ddp, self.inputs)).backward()
        t0 = time.perf_counter()
        self.opt.step()
        optimizer_s = time.perf_counter() - t0
        release_grads(self.model)
        if keep:
            self._kept.append((self.recorder.records[-1], optimizer_s))
        self.recorder.records.clear()

    def take(self) -> list[tuple]:
        kept, self._kept = self._kept, []
        return kept

    def light_step(self, keep: bool) -> None:
        self.recorder.pause()
        try:
            self.opt.zero_grad(set_to_none=True)
            self.stamps.ready.clear()
            t0 = time.perf_counter()
            self.loss_fn(call_with(self.ddp, self.inputs)).backward()
            self.opt.step()
        finally:
            self.recorder.resume()
        release_grads(self.model)
        if keep:  # since the start of forward, as the recorder's times
            self._light.append(self.stamps.since(t0))

    def take_light(self) -> list[tuple[float, float]]:
        """(end of forward, last gradient) of each kept light step, seconds since its start."""
        kept, self._light = self._light, []
        return kept


class Variant:
    """One strategy's plan run by stock DDP with its caps (``plan`` None: stock DDP's defaults), on a
    :meth:`SharedWeights.module` with the shared momentum.

    Its DDP lives for one turn: :meth:`start` makes it and runs two untimed steps, :meth:`step` runs
    one training step and returns its seconds (zero_grad, forward, backward, the optimizer), and
    :meth:`end` frees the gradients and lets the DDP go, its reducer's buckets with it. So a run holds
    one variant's buckets at a time, whatever the number of strategies (a DDP kept for the whole run
    holds its buckets, a gradient copy, between its turns: 1.0-1.7 model copies per variant in
    resident memory, measured). The untimed steps are DDP's first two, as in any job: the first
    reduces the buckets DDP made from the parameters' definition order; the second's forward
    rebuilds them in the order the gradients became ready, with the plan's caps, and its backward
    writes them for the first time (a first write of fresh memory faults its pages in: 75-145 ms for
    resnet152's 240 MB here, 8-16% of its step). The DDP is made without collectives
    (``init_sync=False``): every rank's shared weights are the same."""

    def __init__(self, plan: Plan | None, shared: SharedWeights, inputs: Inputs, loss_fn) -> None:
        from commsched.runtime.data_parallel import ddp_options

        self.plan = plan
        self.model, self.loss_fn = shared.module_with_loss(loss_fn)
        self.options = ddp_options(plan, self.model) if plan is not None else {}
        self.opt = shared.optimizer(self.model)
        self.inputs = inputs
        self.ddp: nn.parallel.DistributedDataParallel | None = None

    def start(self) -> None:
        """This turn's DDP, after its two untimed steps, its gradients freed (what comes next, a
        light profile step, finds their memory free, as it did after the previous variant's turn)."""
        if self.ddp is not None:
            raise CommschedError("Variant.start: the variant's turn has not ended (Variant.end)")
        self.ddp = nn.parallel.DistributedDataParallel(self.model, **self.options, **_NO_INIT_SYNC)
        self.step()
        self.step()
        release_grads(self.model)

    def step(self) -> float:
        if self.ddp is None:
            raise CommschedError("Variant.step outside a turn (Variant.start first)")
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        self.loss_fn(call_with(self.ddp, self.inputs)).backward()
        self.opt.step()
        return time.perf_counter() - t0

    def end(self) -> None:
        """The gradients freed and the DDP let go, now: collected at once where something still
        holds it in a cycle; a DDP that outlives that is said (its buckets stay held)."""
        if self.ddp is None:
            raise CommschedError("Variant.end outside a turn (Variant.start first)")
        release_grads(self.model)
        ddp, self.ddp = weakref.ref(self.ddp), None
        if ddp() is not None:
            gc.collect()
            if ddp() is not None:
                warnings.warn("a variant's DDP outlived its turn: its buckets stay in memory", stacklevel=2)


# DDP's set-up broadcasts rank 0's weights (at 500 Mbit/s, 4 s for resnet152's) unless told not to;
# a torch without ``init_sync`` broadcasts
_NO_INIT_SYNC = {"init_sync": False} if "init_sync" in inspect.signature(nn.parallel.DistributedDataParallel.__init__).parameters else {}
