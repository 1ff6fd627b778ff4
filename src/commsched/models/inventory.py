"""Inventory of a real model: gradient tensors in the order a real backward pass makes them ready.

One training step (forward, loss, backward) is run on the module as it is:

- the forward runs under :class:`torch.utils.flop_counter.FlopCounterMode` (see
  :func:`flop_counter`); forward hooks on every submodule read the counter's running total before
  and after each module call, which gives each call's FLOPs *exclusive* of its child modules
  (FlopCounterMode's own per-module table is keyed by ``ClassName.fqn`` and each parent row repeats
  its children's FLOPs; the before/after difference gives the same numbers without name matching,
  and shared modules are counted per call);
- the backward runs outside the counter, with ``register_post_accumulate_grad_hook`` on every trainable
  parameter recording the order in which gradients are ready. That order is observed, never inferred
  from ``parameters()``: with branches (GoogLeNet aux heads), parameters registered in a different
  order than they run (ViT's class token, post-norm TransformerEncoderLayer's norm1), and even
  within one layer (torch 2.14 on CPU: nn.Linear's bias is ready before its weight, BatchNorm's
  weight before its bias), reversed ``parameters()`` is wrong.

FLOPs become per-tensor ``forward_flops``, the input of OSF Eq. 6 (t_backward = 2 t_forward), by the
rule in :func:`inventory`.

The same forward also records each op's kernel work (:class:`KernelRecorder`): its FLOPs, its kind
(Winograd-eligible convolution, other convolution or matrix product, or FLOP-free memory op) and the
bytes its tensors hold, split into activations (grow with the batch) and parameters or buffers (do
not). It needs shapes only, so it is the same on the meta device as on the CPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.parameter import is_lazy
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from commsched.errors import CommschedError
from commsched.models.inputs import Inputs, as_inputs, batch_of, call_with
from commsched.models.inventory_types import GradTensor, KernelWork, ModelInventory
from commsched.models.params import check_module, few

__all__ = ["GradTensor", "KernelRecorder", "KernelWork", "ModelInventory", "flop_counter", "inventory", "sum_of_means"]


def _attention_flops(query_shape, key_shape, value_shape, *_args, out_shape=None, **_kwargs) -> int:
    """Q K^T plus attention-weights x V, 2 FLOPs per multiply-add, as torch's own sdpa formula."""
    b, h, s_q, d_q = query_shape
    s_k = key_shape[-2]
    d_v = value_shape[-1]
    return 2 * b * h * s_q * s_k * d_q + 2 * b * h * s_q * s_k * d_v


def _lstm_layer_flops(input_shape, w_ih_shape, w_hh_shape, *_args, out_shape=None, **_kwargs) -> int:
    """One LSTM layer over a sequence: per step the input (in) and the hidden state (h) times their
    gate weights (4h x in, 4h x h), 2 FLOPs per multiply-add; the gates' pointwise work is left out,
    as for every other layer. The input is (steps, batch, in) or (batch, steps, in): both lead."""
    steps_x_batch = input_shape[0] * input_shape[1] if len(input_shape) == 3 else input_shape[0]
    return 2 * steps_x_batch * (w_ih_shape[0] * w_ih_shape[1] + w_hh_shape[0] * w_hh_shape[1])


def flop_counter() -> FlopCounterMode:
    """A FlopCounterMode that also counts the CPU flash-attention kernel and the CPU LSTM layer.

    torch 2.14's registry lacks ``aten._scaled_dot_product_flash_attention_for_cpu``, the kernel
    nn.MultiheadAttention's scaled_dot_product_attention takes on the CPU without dropout (e.g.
    vit_b_16); uncounted, ViT-B/16 would lose ~4% of its forward FLOPs. It lacks
    ``aten.mkldnn_rnn_layer`` too, oneDNN's LSTM layer that ``nn.LSTM`` runs on the CPU: uncounted, an
    LSTM had no compute at all (``nn.GRU`` runs as matrix products, which are counted).
    """
    return FlopCounterMode(
        display=False,
        custom_mapping={
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops,
            torch.ops.aten.mkldnn_rnn_layer: _lstm_layer_flops,
        },
    )


# Ops that allocate without writing, reinterpret a tensor without copying it (``_unsafe_view`` has no
# alias annotation in its schema, unlike view/reshape/transpose, which the schema check catches), or
# make a Python scalar a tensor (``lift_fresh`` on the CPU, ``scalar_tensor`` on the meta device).
_NO_BYTES = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                       "aten::new_empty_strided", "aten::_unsafe_view", "aten::lift_fresh",
                       "aten::scalar_tensor"})
# Ops that read only the rows they gather, not their whole (table) input: 2x their output's bytes.
_GATHERS = frozenset({"aten::embedding", "aten::index", "aten::index_select", "aten::gather"})


def _tensors(x: object) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, Mapping):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _storage_key(t: torch.Tensor) -> int | None:
    """Identity of ``t``'s storage (shared by all its views, also on the meta device); None for a
    tensor without one. ``_cdata`` is the storage's C++ address, what torch's own StorageWeakRef keys on."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _nbytes(t: torch.Tensor) -> int:
    """Bytes ``t`` addresses: its elements', but no more than its storage holds (a broadcast
    scalar, expanded with stride 0, reads 4 bytes however many elements it shows)."""
    n = t.numel() * t.element_size()
    try:
        return min(n, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, AttributeError):
        return n


class KernelRecorder(TorchDispatchMode):
    """Records each aten op of a forward pass as kernel work (:class:`KernelWork`).

    Enter it *inside* ``counter`` (a running FlopCounterMode): each op reaches this mode first, and
    the counter's total before and after the op gives its FLOPs. Kinds:

    - an op with FLOPs is a compute kernel: "winograd" when it is a dense (groups = 1, untransposed)
      3x3 convolution with stride 1 and dilation 1, the case cuDNN's Winograd algorithms take
      (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016), else "gemm"
      (other convolutions, grouped and depthwise ones included, and matrix products);
    - an op without FLOPs is a memory op, unless it only views or allocates (schema alias without
      write, or :data:`_NO_BYTES`): all memory ops add up into one "memory" entry.

    Bytes are those of the op's input and output tensors (an in-place op's tensor counts as read and
    written); a gather counts twice its output. Tensors whose storage is one of ``fixed_storages``
    (the module's parameters and buffers) count as ``fixed_bytes``, the rest as ``batch_bytes``.

    A ``scaled_dot_product_attention`` call is one "gemm" kernel (its FLOPs; its query, key, value,
    mask and output bytes), whatever aten ops it runs as: on GPUs torch runs it as one fused kernel
    that never writes the attention matrix, on the CPU as one flash kernel, on the meta device as
    the unfused math (matmuls, softmax); :func:`_attention_as_one_kernel` marks the call.
    """

    def __init__(self, counter: FlopCounterMode, fixed_storages: set[int]) -> None:
        super().__init__()
        self.counter = counter
        self.fixed_storages = fixed_storages
        self.compute: list[KernelWork] = []
        self.memory_batch_bytes = 0
        self.memory_fixed_bytes = 0
        self.in_attention = False

    def kernels(self) -> tuple[KernelWork, ...]:
        memory = KernelWork("memory", 0.0, float(self.memory_batch_bytes), float(self.memory_fixed_bytes))
        return (*self.compute, memory)

    def _bytes(self, tensors: list[torch.Tensor]) -> tuple[int, int]:
        batch = fixed = 0
        for t in tensors:
            if _storage_key(t) in self.fixed_storages:
                fixed += _nbytes(t)
            else:
                batch += _nbytes(t)
        return batch, fixed

    def attention(self, func, args, kwargs):
        """Run one scaled_dot_product_attention call and record it as one kernel."""
        before = self.counter.get_total_flops()
        self.in_attention = True
        try:
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.dim() == 4:
                # the fused kernels write (batch, sequence, heads, dim) and return it transposed, so
                # that MultiheadAttention's merge of the heads is a view; the unfused math (meta
                # device) writes (batch, heads, sequence, dim), which would cost a copy there
                out = out.transpose(1, 2).contiguous().transpose(1, 2)
        finally:
            self.in_attention = False
        batch, fixed = self._bytes(_tensors(args) + _tensors(kwargs) + _tensors(out))
        self.compute.append(KernelWork("gemm", float(self.counter.get_total_flops() - before), float(batch), float(fixed)))
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.in_attention:  # inside one fused-attention kernel: recorded as a whole
            return func(*args, **kwargs)
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)
        flops = self.counter.get_total_flops() - before
        name = func._schema.name
        returns = func._schema.returns
        view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if not flops and (view or name in _NO_BYTES):
            return out
        outputs = _tensors(out)
        if name in _GATHERS:
            batch, fixed = 2 * sum(_nbytes(t) for t in outputs), 0
        else:
            batch, fixed = self._bytes(_tensors(args) + _tensors(kwargs) + outputs)
        if not flops:
            self.memory_batch_bytes += batch
            self.memory_fixed_bytes += fixed
            return out
        kind = "gemm"
        if name == "aten::convolution":
            weight, stride, dilation, transposed, groups = args[1], args[3], args[5], args[6], args[8]
            if (tuple(weight.shape[2:]) == (3, 3) and groups == 1 and not transposed
                    and all(s == 1 for s in stride) and all(d == 1 for d in dilation)):
                kind = "winograd"
        self.compute.append(KernelWork(kind, float(flops), float(batch), float(fixed)))
        return out


@contextmanager
def _attention_as_one_kernel(recorder: KernelRecorder) -> Iterator[None]:
    """While inside, ``torch.nn.functional.scaled_dot_product_attention`` runs through
    ``recorder.attention``: for the module's own calls and for nn.MultiheadAttention's, which
    calls it through torch.nn.functional's module global. (A TorchFunctionMode cannot do this: it
    does not see the call nested in ``F.multi_head_attention_forward``.) Restored on exit."""
    original = F.scaled_dot_product_attention

    @functools.wraps(original)
    def attention(*args, **kwargs):
        return recorder.attention(original, args, kwargs)

    F.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _output_tensors(output: object, seen: set[int] | None = None) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return [t for v in output.values() for t in _output_tensors(v, seen)]
    if isinstance(output, Sequence) and not isinstance(output, (str, bytes)):
        # Tuples, lists and namedtuples such as torchvision's GoogLeNetOutputs / InceptionOutputs.
        return [t for v in output for t in _output_tensors(v, seen)]
    if dataclasses.is_dataclass(output) and not isinstance(output, type):  # a model's output record (not walked twice)
        seen = set() if seen is None else seen
        if id(output) in seen:
            return []
        seen.add(id(output))
        return [t for f in dataclasses.fields(output) for t in _output_tensors(getattr(output, f.name, None), seen)]
    return []


def remove_all(handles: list) -> None:
    """Remove hook handles (the ones registered so far, when a probe stops half way)."""
    for h in handles:
        h.remove()


@contextmanager
def restored_state(module: nn.Module, params: Sequence[tuple[str, nn.Parameter]]) -> Iterator[None]:
    """Probe ``module`` freely inside; afterwards it is as it was: its train/eval flags, its
    parameters' ``.grad``, the parameters, buffers and submodules each module registers (a buffer
    the forward rebinds or adds, a submodule it builds: the registrations before are put back, in
    their order), the buffers' values (BatchNorm running statistics) and the trainable parameters'
    values (a forward that changes them in place: ``nn.Embedding(max_norm=...)``, a weight
    constraint). Only tensors the probe changed are written back (a graph the caller built before
    stays valid). Buffers are kept on their device meanwhile, trainable parameters on the CPU;
    frozen parameters are not kept (a frozen backbone, quantised weights): one the forward changes
    in place stays changed. An error restoring a tensor never hides one raised inside."""
    modules = list(module.modules())
    saved_modes = [(m, m.training) for m in modules]
    registered = [(m, dict(m._parameters), dict(m._buffers), dict(m._modules)) for m in modules]
    trainable = {id(p) for _, p in params}
    with torch.no_grad():  # meta tensors (a model inventoried without memory) hold no values
        kept: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}
        for m in modules:
            for d, on_cpu in ((m._buffers, False), (m._parameters, True)):
                for t in d.values():
                    if t is None or id(t) in kept or t.is_meta or is_lazy(t) or (on_cpu and id(t) not in trainable):
                        continue
                    kept[id(t)] = (t, t.detach().to("cpu", copy=True) if on_cpu else t.detach().clone(), t._version)
    saved_grads = [(p, p.grad) for _, p in params]
    failed: list[str] = []
    raised = False
    try:
        yield
    except BaseException:
        raised = True
        raise
    finally:
        for p, g in saved_grads:
            p.grad = g
        for m, ps, bs, ms in registered:
            for d, was in ((m._parameters, ps), (m._buffers, bs), (m._modules, ms)):
                if [(k, id(v)) for k, v in d.items()] != [(k, id(v)) for k, v in was.items()]:
                    d.clear()
                    d.update(was)
        with torch.no_grad():
            for t, value, version in kept.values():
                try:  # untouched: not written (its version, a caller's graph, stay)
                    same = t._version == version and torch.equal(t.detach().to(value.device), value)
                except Exception:  # noqa: BLE001 - a layout without equality (sparse): its version says
                    same = t._version == version
                if same:
                    continue
                try:
                    if t.shape == value.shape and t.dtype == value.dtype:
                        t.copy_(value)
                    else:  # resized inside (an observer's buffer): its old tensor back
                        t.data = value.to(t.device)
                except Exception as e:  # noqa: BLE001 - said below, unless an error is already on its way
                    failed.append(f"{tuple(t.shape)} {type(e).__name__}: {e}")
        for m, mode in saved_modes:
            m.training = mode
        if failed and not raised:
            raise CommschedError(f"could not restore {len(failed)} tensor(s) of the model after probing it, first {failed[0]}")


def sum_of_means(output: object) -> torch.Tensor:
    """Default loss: sum over every floating-point output tensor of its mean.

    Any scalar that depends on all outputs gives the same gradient order and shapes as a real loss.
    """
    tensors = [t for t in _output_tensors(output) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        raise CommschedError("model output holds no floating-point tensor that requires grad")
    return torch.stack([t.float().mean() for t in tensors]).sum()


@dataclass
class _CallFrame:
    module: nn.Module
    start_flops: int
    children_flops: int = 0


@dataclass
class _ForwardRecord:
    """Per-module exclusive FLOPs and first-call order, filled by the forward hooks of one pass."""

    counter: FlopCounterMode
    exclusive_flops: dict[int, int] = field(default_factory=dict)  # id(module) -> FLOPs
    order: dict[int, int] = field(default_factory=dict)  # id(module) -> index of its first call
    stack: list[_CallFrame] = field(default_factory=list)

    def pre_hook(self, module: nn.Module, _args: object) -> None:
        self.order.setdefault(id(module), len(self.order))
        self.stack.append(_CallFrame(module, self.counter.get_total_flops()))

    def post_hook(self, module: nn.Module, _args: object, _output: object) -> None:
        frame = self.stack.pop()
        if frame.module is not module:
            raise CommschedError(
                f"forward hooks out of order: {type(module).__name__} ended inside {type(frame.module).__name__}"
            )
        inclusive = self.counter.get_total_flops() - frame.start_flops
        key = id(module)
        self.exclusive_flops[key] = self.exclusive_flops.get(key, 0) + inclusive - frame.children_flops
        if self.stack:
            self.stack[-1].children_flops += inclusive


def _trainable_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    # named_parameters() already drops repeats of shared (tied) parameters, keeping the first name.
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def check_dense_gradients(name: str, params: Sequence[tuple[str, nn.Parameter]]) -> None:
    """An error naming the sparse gradients a step left on ``params``: DDP reduces each in a bucket of
    its own, of the rows the step touched, where every cost and planner here is of dense gradients.
    Likewise for parameters without elements: DDP puts them in its buckets, where a plan of the
    profile's tensors (each of at least one byte) has no place for them."""
    empty = [n for n, p in params if p.numel() == 0]
    if empty:
        raise CommschedError(
            f"model {name!r} has {len(empty)} trainable parameter(s) without elements ({few(empty)}): DDP reduces "
            "them in its buckets, and commsched's plans hold tensors of at least one byte; drop them, or "
            "requires_grad_(False) on them, to plan the model"
        )
    sparse = [n for n, p in params if p.grad is not None and p.grad.is_sparse]
    if sparse:
        raise CommschedError(
            f"model {name!r} has {len(sparse)} sparse gradient(s) ({few(sparse)}; nn.Embedding(sparse=True), say): DDP "
            "all-reduces each in a bucket of its own, by the rows a step touched, and commsched plans dense "
            "gradients only; make them dense (sparse=False) to plan the model"
        )


def inventory(
    module: nn.Module,
    example_inputs: Inputs,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    name: str = "model",
    batch_size: int | None = None,
) -> ModelInventory:
    """Run one training step of ``module`` on ``example_inputs`` and list its gradient tensors.

    The module runs where it lives (CPU for the zoo) in training mode; its per-module train/eval
    flags, buffers (e.g. BatchNorm running statistics) and existing ``.grad`` values are restored
    afterwards. ``loss_fn(output)`` turns the output into a scalar (default :func:`sum_of_means`).

    Tensors are listed in the order their post-accumulate-grad hooks fire. Trainable parameters
    (``requires_grad``) that receive no gradient in this backward (unused branches) are left out,
    as are frozen parameters; tied parameters appear once, under their first ``named_parameters``
    name. ``forward_flops`` is for ``batch_size`` samples, by default the batch in ``example_inputs`` (the
    first dimension of its first tensor).

    FLOP attribution (OSF Eq. 6 then charges 2x each tensor's forward FLOPs to the backward compute
    just before it becomes ready):

    1. a module's own FLOPs (its calls minus its child modules' calls, so functional ops such as
       nn.MultiheadAttention's projections and attention count for it) go to its *first-ready*
       direct parameter; its other parameters get 0;
    2. a module without direct parameters that received gradients: a container (has children) gives
       its own FLOPs to the first-ready parameter beneath it; a leaf (pooling, activation, a frozen
       layer) gives them to the parameter-owning module that ran right *before* it in forward order,
       because in backward that module's gradients become ready right after the leaf's backward;
       failing that, to the first such module after it;
    3. FLOPs counted outside the module's call are treated as the root module's own FLOPs.

    The tensors' ``forward_flops`` therefore sum exactly to the counter's total.
    """
    check_module(module, "inventory")
    example_inputs = as_inputs(example_inputs)
    batch_size = _batch_size(example_inputs, name) if batch_size is None else batch_size
    params = _trainable_parameters(module)
    if not params:
        raise CommschedError(f"model {name!r} has no trainable parameters")
    loss_fn = sum_of_means if loss_fn is None else loss_fn

    modules = list(module.modules())  # deduplicated by torch

    ready: list[nn.Parameter] = []
    counter = flop_counter()
    record = _ForwardRecord(counter)
    fixed = {_storage_key(t) for t in (*module.parameters(), *module.buffers())} - {None}
    recorder = KernelRecorder(counter, fixed)
    handles = []
    with restored_state(module, params), contextlib.ExitStack() as cleanup:
        cleanup.callback(remove_all, handles)
        for _, p in params:
            p.grad = None
            handles.append(p.register_post_accumulate_grad_hook(ready.append))
        for m in modules:
            handles.append(m.register_forward_pre_hook(record.pre_hook))
            handles.append(m.register_forward_hook(record.post_hook))
        module.train()
        with torch.enable_grad():
            # One pass: the counter sees only the forward; backward runs after it is closed.
            with counter, recorder, _attention_as_one_kernel(recorder):
                output = call_with(module, example_inputs)
            total_flops = counter.get_total_flops()
            loss = loss_fn(output)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise CommschedError(f"loss_fn must return a scalar tensor for {name!r}, got {type(loss).__name__}"
                                     + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
            loss.backward()
            check_dense_gradients(name, params)
    if not ready:
        raise CommschedError(f"no parameter of {name!r} received a gradient in the backward pass")
    # Hooks fire once per parameter per backward; keep the first firing should one repeat.
    ready = list({id(p): p for p in ready}.values())
    rank = {id(p): i for i, p in enumerate(ready)}
    flops_by_rank = _attribute(module, modules, record, total_flops, rank)

    names = {id(p): n for n, p in params}
    tensors = tuple(
        GradTensor(
            name=names[id(p)],
            bytes=p.numel() * p.element_size(),
            numel=p.numel(),
            dtype=str(p.dtype).removeprefix("torch."),
            forward_flops=float(flops_by_rank[i]),
        )
        for i, p in enumerate(ready)
    )
    return ModelInventory(
        model=name,
        batch_size=batch_size,
        tensors=tensors,
        forward_flops=float(total_flops),
        parameters=sum(t.numel for t in tensors),
        kernels=_kernels_or_none(recorder, total_flops),
    )


def _kernels_or_none(recorder: KernelRecorder, total_flops: int) -> tuple[KernelWork, ...]:
    """The recorded kernels, or none (the estimate then uses the efficiency c alone) where some FLOPs
    escaped them, as they could in ops this recorder does not see (higher-order ops)."""
    kernels = recorder.kernels()
    return kernels if sum(k.flops for k in kernels) == total_flops else ()


def _batch_size(example_inputs: Inputs, name: str) -> int:
    batch = batch_of(example_inputs)
    if batch is None:
        raise CommschedError(
            f"the example inputs of {name!r} hold no tensor with a batch dimension to read the batch from (a list of "
            "tensors is not read): give its factory a batch_size argument"
        )
    return batch


def _attribute(
    root: nn.Module,
    modules: list[nn.Module],
    record: _ForwardRecord,
    total_flops: int,
    rank: dict[int, int],
) -> list[int]:
    """Per ready-rank FLOPs following the rules in :func:`inventory`'s docstring."""

    def first_ready(m: nn.Module, *, recurse: bool) -> int | None:
        ranks = [rank[id(p)] for p in m.parameters(recurse=recurse) if id(p) in rank]
        return min(ranks) if ranks else None

    # Parameter-owning modules in forward order, to place the FLOPs of parameter-free leaves.
    called = sorted((record.order[id(m)], m) for m in modules if id(m) in record.order)
    owners = [(pos, r) for pos, m in called if (r := first_ready(m, recurse=False)) is not None]

    def target(m: nn.Module) -> int:
        own = first_ready(m, recurse=False)
        if own is not None:
            return own
        if any(True for _ in m.children()):
            beneath = first_ready(m, recurse=True)
            if beneath is not None:
                return beneath
        pos = record.order.get(id(m), -1)
        before = [r for p, r in owners if p < pos]
        if before:
            return before[-1]
        after = [r for p, r in owners if p > pos]
        return after[0] if after else 0

    flops = [0] * len(rank)
    by_id = {id(m): m for m in modules}
    for key, f in record.exclusive_flops.items():
        if f:
            flops[target(by_id[key])] += f
    outside = total_flops - sum(record.exclusive_flops.values())
    if outside:
        flops[target(root)] += outside
    return flops
