"""Measured profiles: per-tensor gradient-ready times of real training steps (torch).

The MG-WFBP profiler (Shi, Chu, Li; Section 5.1, "Time Measurement of Backward Propagation") times
the backward pass per gradient tensor: a timestamp when each tensor's gradient is ready, and the
difference between neighbouring timestamps is the backward compute that tensor waits for. Here the
timestamps come from ``register_post_accumulate_grad_hook`` (it fires once the gradient has been
accumulated into ``.grad``, i.e. exactly when a data-parallel runtime could start communicating it),
and the order of the tensors is the order those hooks fire -- observed, never inferred from
``parameters()`` (see :mod:`commsched.models.inventory`).

The result is a ``commsched.profile/v1`` :class:`~commsched.types.ModelProfile` with
``source="measured"``; the simulator reads it exactly like an estimated one.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from commsched.errors import CommschedError
from commsched.report.progress import progress as progress_bar
from commsched.models.inputs import Inputs, as_inputs, batch_of, call_with, check_loss
from commsched.models.inventory import check_dense_gradients, remove_all, restored_state, sum_of_means
from commsched.models.params import check_module, few, lazy_names, trainable_parameters
from commsched.types import ModelProfile, TensorSpec

__all__ = ["measure_device", "measure_factory_profile", "measure_profile", "measure_zoo_profile"]

SEED = 0


class _CpuClock:
    """Host wall clock. CPU kernels run synchronously on the calling thread, so host time is compute time."""

    def mark(self) -> float:
        return time.perf_counter()

    def finish(self) -> None:
        pass

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def synchronize(self) -> None:
        # The CPU autograd engine already runs one node at a time on one thread; nothing to wait for.
        pass


class _CudaClock:
    """CUDA events on the current stream: kernels are asynchronous, so host time would measure launches.

    Events are read once per iteration, after one device synchronisation (``finish``), so the
    measurement does not serialise the backward pass unless ``sequential`` asks for it.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def finish(self) -> None:
        torch.cuda.synchronize(self.device)

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


def _check_count(what: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CommschedError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


def _infer_batch_size(example_inputs: Inputs) -> int:
    batch = batch_of(example_inputs)
    if batch is None:
        raise CommschedError("example_inputs holds no tensor with a batch dimension (a PackedSequence, a list of tensors): pass batch_size=")
    return batch


def _device_of(params: list[tuple[str, nn.Parameter]]) -> torch.device:
    devices = {p.device for _, p in params}
    if len(devices) != 1:
        # One clock per measurement: events of different GPUs (or GPU and host) cannot be subtracted.
        raise CommschedError(
            f"measure_profile needs all trainable parameters on one device, got {sorted(map(str, devices))}"
        )
    return devices.pop()


def measure_profile(
    module: nn.Module,
    example_inputs: Inputs,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    *,
    name: str = "model",
    batch_size: int | None = None,
    warmup: int = 3,
    iters: int = 10,
    sequential: bool = False,
    progress: bool = False,
    device_label: str | None = None,
) -> ModelProfile:
    """Measure ``module``'s forward time and per-tensor backward times over real training steps.

    Runs ``warmup`` un-timed then ``iters`` timed steps of forward, ``loss_fn(output)`` (default
    :func:`~commsched.models.inventory.sum_of_means`) and backward on ``example_inputs``
    (positional: a tuple or a tensor; by keyword: a dict), with the module in training mode and
    every ``.grad`` set to None before each step. There is no optimizer
    step; afterwards the per-module train/eval flags, the buffers (BatchNorm running statistics),
    the parameters (a forward may change them in place) and their previous ``.grad`` are restored
    (:func:`~commsched.models.inventory.restored_state`), and the caller's global RNG state is left
    as it was (dropout draws from a forked RNG). Python state the forward or loss keeps (a step
    counter, a data iterator) advances by ``warmup + iters`` steps.

    Clocks: ``time.perf_counter()`` when the parameters are on the CPU; when they are on a CUDA
    device, ``torch.cuda.Event(enable_timing=True)`` recorded at forward start, after the loss and in
    every hook, read after one ``torch.cuda.synchronize`` at the end of each iteration.

    Per tensor i (in ready order), with ready_{-1} the start of backward (just before
    ``loss.backward()``, the same instant as the end of the loss):

    - ``forward_s`` = median over iterations of (loss computed - forward start);
    - ``backward_s[i]`` = median over iterations of (ready_i - ready_{i-1}), clipped at 0 (CUDA events
      recorded on different streams need not be ordered).

    These are medians of the per-tensor deltas, so ``sum(backward_s)`` is not the median backward
    time (a sum of medians is not the median of sums); it is robust to one slow iteration hitting a
    few tensors, which is what a per-tensor schedule needs.

    ``sequential=True`` is MG-WFBP Section 5.1's mode: every hook synchronises the device before its
    timestamp, so kernels of different tensors cannot overlap on CUDA streams and each delta is the
    compute of that tensor alone (at the price of slowing the backward pass). On the CPU it changes
    nothing: the CPU autograd engine already runs one node at a time on one thread.

    The order of the tensors is the order their hooks fired in the first timed iteration; every other
    timed iteration must fire them in the same order, else CommschedError names the first tensor
    that differs. Parameters that never receive a gradient (unused branches) are left out, as are
    frozen ones (``requires_grad=False``) and empty ones (no bytes to communicate); tied parameters
    appear once, under their first ``named_parameters`` name. Optimizer time is not measured
    (``optimizer_s`` is 0).

    ``batch_size`` defaults to the first dimension of the first tensor input; ``device_label`` (the
    profile's ``device`` field) defaults to the CUDA device name or ``"cpu"``. ``progress=True``
    shows a rich progress bar on stderr.
    """
    check_module(module, "measure_profile")
    example_inputs = as_inputs(example_inputs)
    _check_count("warmup", warmup, 0)
    _check_count("iters", iters, 1)
    if batch_size is None:
        batch_size = _infer_batch_size(example_inputs)
    _check_count("batch_size", batch_size, 1)
    if loss_fn is not None:
        check_loss(loss_fn, "measure_profile")
    loss_fn = sum_of_means if loss_fn is None else loss_fn

    lazy = lazy_names(module)
    if lazy:  # sizes not known yet
        raise CommschedError(f"the model has lazy parameters or buffers not initialised yet ({few(lazy)}): run a forward pass (and the loss) first")
    # named_parameters() already drops repeats of shared (tied) parameters, keeping the first name.
    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad and p.numel() > 0]
    if not params:
        raise CommschedError(f"model {name!r} has no trainable parameters")
    device = _device_of(params)
    if device.type not in ("cpu", "cuda"):
        # other devices run asynchronously too, and only CUDA events are read here
        raise CommschedError(f"measure_profile times parameters on the CPU or a CUDA device, got them on {device}")
    is_cuda = device.type == "cuda"
    clock: _CpuClock | _CudaClock = _CudaClock(device) if is_cuda else _CpuClock()
    if device_label is None:
        device_label = torch.cuda.get_device_name(device) if is_cuda else "cpu"


    log: list[tuple[int, Any]] = []  # (parameter index, clock mark) in hook order, this iteration

    def make_hook(index: int) -> Callable[[torch.Tensor], None]:
        def hook(_param: torch.Tensor) -> None:
            if sequential:
                clock.synchronize()
            log.append((index, clock.mark()))

        return hook

    forward_samples: list[float] = []
    orders: list[tuple[int, ...]] = []
    ready_samples: list[list[float]] = []  # per timed iteration, ready time of each tensor after backward start

    handles = []
    bar = progress_bar(progress, f"measuring {name}", warmup + iters)
    # fork_rng takes CUDA device indices; on the CPU only the CPU generator is forked.
    rng_devices = [device.index if device.index is not None else torch.cuda.current_device()] if is_cuda else []
    with restored_state(module, params), contextlib.ExitStack() as cleanup:
        cleanup.callback(remove_all, handles)
        with torch.random.fork_rng(devices=rng_devices), bar as steps:
            torch.manual_seed(SEED)
            for i, (_, p) in enumerate(params):
                handles.append(p.register_post_accumulate_grad_hook(make_hook(i)))
            module.train()
            for step in range(warmup + iters):
                for _, p in params:
                    p.grad = None
                log.clear()
                with torch.enable_grad():
                    start = clock.mark()
                    loss = loss_fn(call_with(module, example_inputs))
                    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
                        raise CommschedError(
                            f"loss_fn must return a scalar tensor that requires grad for {name!r}, "
                            f"got {type(loss).__name__}"
                            + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else "")
                        )
                    # The loss is computed: the forward ends and the backward starts at this one mark.
                    backward_start = clock.mark()
                    loss.backward()
                del loss
                clock.finish()
                if step == 0:  # every parameter DDP reduces, those without elements too
                    check_dense_gradients(name, list(trainable_parameters(module).items()))
                if step >= warmup:
                    forward_samples.append(clock.seconds(start, backward_start))
                    # Hooks fire once per parameter per backward; keep the first firing should one repeat.
                    first: dict[int, Any] = {}
                    for index, mark in log:
                        first.setdefault(index, mark)
                    orders.append(tuple(first))
                    ready_samples.append([clock.seconds(backward_start, m) for m in first.values()])
                steps.advance()
        log.clear()

    names = [n for n, _ in params]
    order = _check_orders(orders, names, name)
    tensors = []
    for pos, index in enumerate(order):
        deltas = [
            max(ready[pos] - (ready[pos - 1] if pos else 0.0), 0.0)
            for ready in ready_samples
        ]
        p = params[index][1]
        tensors.append(TensorSpec(names[index], p.numel() * p.element_size(), statistics.median(deltas)))
    return ModelProfile(
        model=name,
        batch_size=batch_size,
        device=device_label,
        source="measured",
        forward_s=max(statistics.median(forward_samples), 0.0),
        tensors=tuple(tensors),
        optimizer_s=0.0,
    )


def _check_orders(orders: list[tuple[int, ...]], names: list[str], model: str) -> tuple[int, ...]:
    """The first timed iteration's hook order, after checking every other timed iteration matches it."""
    reference = orders[0]
    if not reference:
        raise CommschedError(f"no parameter of {model!r} received a gradient in the backward pass")
    for k, order in enumerate(orders[1:], start=2):
        if order == reference:
            continue
        pos = next(
            (i for i, (a, b) in enumerate(zip(reference, order)) if a != b), min(len(reference), len(order))
        )
        was = names[reference[pos]] if pos < len(reference) else None
        now = names[order[pos]] if pos < len(order) else None
        tensor = was if was is not None else now
        raise CommschedError(
            f"gradient-ready order of {model!r} changed between timed iterations at tensor {tensor!r}: "
            f"position {pos} held {was!r} in iteration 1 and {now!r} in iteration {k} "
            f"(the model's backward graph must be the same every step)"
        )
    return reference


def measure_device(spec: str | None = None, *, cuda_available: bool | None = None, cuda_count: int | None = None) -> torch.device:
    """The torch device a measured profile runs on: ``spec`` is ``"cpu"``, ``"cuda"`` or ``"cuda:N"``;
    None means CUDA where torch sees a GPU, else the CPU (a profile measured on the CPU is no
    profile of a GPU job). Asking for CUDA on a machine without it is a CommschedError.
    ``cuda_available``/``cuda_count`` default to torch's answers (tests pass their own)."""
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if spec is None:
        return torch.device("cuda" if available else "cpu")
    text = spec.strip().lower() if isinstance(spec, str) else None
    if text == "cpu":
        return torch.device("cpu")
    if text is not None and (text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit())):
        if not available:
            raise CommschedError(
                f"device {spec!r}: this machine has no CUDA device (torch.cuda.is_available() is False); "
                f"measure with device 'cpu' or on a machine with a GPU"
            )
        count = torch.cuda.device_count() if cuda_count is None else cuda_count
        index = int(text[5:]) if ":" in text else None
        if index is not None and index >= count:
            raise CommschedError(f"device {spec!r}: this machine has {count} CUDA device(s), indices 0..{count - 1}")
        return torch.device(text)
    raise CommschedError(f"a measuring device is 'cpu', 'cuda' or 'cuda:N', got {spec!r}")


def measure_zoo_profile(
    name: str,
    batch_size: int,
    image_size: int | None = None,
    *,
    device: str | None = None,
    warmup: int = 3,
    iters: int = 10,
    sequential: bool = False,
    progress: bool = False,
) -> ModelProfile:
    """Measured profile of zoo model ``name`` at ``batch_size`` samples on ``device``
    (:func:`measure_device`: CUDA when torch sees a GPU, else the CPU, unless named).

    The model is built with weights from ``torch.manual_seed(0)`` (under a forked RNG, so the caller's
    global state is untouched) on the CPU and moved to the device with its inputs
    (:func:`~commsched.models.zoo.example_input`), and trained on
    :func:`~commsched.models.zoo.training_loss`; see :func:`measure_profile` for what is timed. The
    profile's ``device`` is the GPU's name (``torch.cuda.get_device_name``) or ``"cpu"``.
    """
    from commsched.models.zoo import build_model, example_input, runs_on, training_loss

    target = measure_device(device)  # a bad or missing device fails before the model is built
    inputs = example_input(name, batch_size, image_size)  # validates name, batch and image size first
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = build_model(name)
    if target.type != "cpu":
        model = model.to(target)
        inputs = tuple(x.to(target) for x in inputs)
    with runs_on(name, inputs):
        return measure_profile(
            model,
            inputs,
            lambda out: training_loss(name, out),
            name=name,
            batch_size=batch_size,
            warmup=warmup,
            iters=iters,
            sequential=sequential,
            progress=progress,
        )


def measure_factory_profile(
    spec: str,
    batch_size: int,
    image_size: int | None = None,
    *,
    device: str | None = None,
    warmup: int = 3,
    iters: int = 10,
    sequential: bool = False,
    progress: bool = False,
) -> tuple[ModelProfile, str]:
    """Measured profile of the user's model ``spec`` (``package.module:factory``,
    :func:`commsched.models.source.build`: its model, example inputs, positional or by keyword, and
    loss) on ``device`` (:func:`measure_device`), timed as :func:`measure_zoo_profile` times a zoo
    model, its generators seeded with 0 and restored after. The factory gets ``batch_size``,
    ``image_size`` and, on a GPU, ``device`` where it takes them; one that takes no ``device`` is
    built on the CPU and its model and inputs moved (the tensors its loss function holds cannot be:
    a mismatch is an error saying so). Returns the profile and a note naming the options the
    factory did not take (else "")."""
    from commsched.models.inputs import moved
    from commsched.models.source import build, check_every_gradient, dtypes_note, forked_rng, ignored_note, runs_on

    target = measure_device(device)
    with forked_rng():
        built = build(spec, batch_size, image_size, str(target) if target.type != "cpu" else None)
        if built.batch_size is None:
            raise CommschedError(f"{spec!r} takes no batch_size and its example inputs hold no tensor to read a batch from")
        model, inputs = built.model, built.inputs
        if target.type != "cpu" and built.device is None:
            model, inputs = model.to(target), moved(inputs, target)
        try:
            with runs_on(spec, inputs):
                profile = measure_profile(
                    model, inputs, built.loss_fn, name=spec, batch_size=built.batch_size, warmup=warmup, iters=iters,
                    sequential=sequential, progress=progress,
                )
        except CommschedError as e:
            if target.type != "cpu" and built.device is None and "device" in str(e):
                raise CommschedError(
                    f"{e} ({spec} takes no device: its model and inputs were moved to {target}, tensors its loss function "
                    "holds were not; give the factory a device argument, or measure with --device cpu)"
                ) from e
            raise
    check_every_gradient(spec, model, profile.names, "a plan made here")
    dtypes = {n: str(p.dtype).removeprefix("torch.") for n, p in model.named_parameters()}
    notes = [ignored_note(spec, built, batch_size, image_size), dtypes_note(spec, (dtypes[n] for n in profile.names))]
    return profile, "\n".join(n for n in notes if n)
