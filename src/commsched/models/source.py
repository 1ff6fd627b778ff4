"""A model to train by name: a zoo model, or the user's own given as an import path.

``package.module:factory`` names a function that returns ``(model, example_inputs, loss_fn)``: an
``nn.Module``, the inputs of one forward (a tensor or a tuple of them, positional, or a dict of them
by keyword: :mod:`commsched.models.inputs`) and a function from the model's output to a scalar
loss. The factory is called with ``batch_size`` and ``image_size`` (and, when measuring on a GPU,
``device``) where its signature takes them (by those names), so one factory serves any batch; one
that takes no ``batch_size`` makes its own, read from its first input tensor
(``Built.batch_size``). It is imported and called on every rank, after seeding torch's generator
with 0, so every rank builds the same model. An error raised while importing or calling it is a one-line error naming the factory,
the exception and where it was raised.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from commsched.errors import CommschedError
from commsched.models.inputs import Inputs, as_inputs, batch_of, call_with, check_loss
from commsched.models.names import is_import_path
from commsched.models.params import few, lazy_names, without_gradient


@dataclass
class Built:
    """A model ready to train: the module, one forward's inputs, the loss of its output, and the
    batch and image size it was built with (a factory's own where it takes no such argument:
    the batch its first input tensor holds, no image size)."""

    model: nn.Module
    inputs: Inputs
    loss_fn: Callable[[object], torch.Tensor]
    batch_size: int | None = None
    image_size: int | None = None
    device: str | None = None  # where a factory that takes ``device`` built the model, inputs and loss


def user_frames(e: BaseException) -> list:
    """The frames of ``e``'s traceback in the user's code: not commsched's own, torch's, the
    standard library's or installed packages'."""
    import os
    import sysconfig
    import traceback

    paths = sysconfig.get_paths()
    libraries = {os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(os.path.abspath(torch.__file__)),
                 *(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)}
    prefixes = tuple(p + os.sep for p in libraries)
    return [f for f in traceback.extract_tb(e.__traceback__)
            if not os.path.abspath(f.filename).startswith(prefixes) and "-packages" + os.sep not in f.filename]


def user_error(what: str, e: BaseException) -> CommschedError:
    """One line for an exception raised in the user's code: its type, message and where it came from."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    at = (user_frames(e) or frames)[-1:]  # the user's own line where there is one, not torch's
    where = f" (at {at[0].filename}:{at[0].lineno})" if at else ""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return CommschedError(f"{what}: {type(e).__name__}{': ' + first if first else ''}{where}")


def load_factory(spec: str) -> Callable:
    """The function ``package.module:factory`` names (the current directory is importable, as with ``python -m``)."""
    import os
    import sys

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommschedError(f"a model import path is package.module:factory, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise CommschedError(f"cannot import {module_name!r} for model {spec!r}: {e}") from e
    except Exception as e:  # noqa: BLE001 - the user's module failed as it ran: say where
        raise user_error(f"importing {module_name!r} for model {spec!r} failed", e) from e
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise CommschedError(f"module {module_name!r} has no {attr!r} (model {spec!r})")
    if not callable(fn):
        raise CommschedError(f"{spec!r} is not callable")
    return fn


def build(spec: str, batch_size: int, image_size: int | None = None, device: str | None = None) -> Built:
    """The model ``spec`` names (zoo or import path) with inputs of ``batch_size`` samples, seeded
    with 0. ``device`` goes to a factory that takes it (``Built.device`` says it did); a zoo model
    and a factory without it are built on the CPU."""
    from commsched.models.zoo import build_model, example_input, training_loss

    torch.manual_seed(0)
    if not is_import_path(spec):
        model = build_model(spec)
        return Built(model, example_input(spec, batch_size, image_size), lambda out: training_loss(spec, out), batch_size, image_size)
    fn = load_factory(spec)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {k: v for k, v in (("batch_size", batch_size), ("image_size", image_size), ("device", device)) if k in params and v is not None}
    try:
        got = fn(**kwargs)
    except Exception as e:  # noqa: BLE001 - the user's factory failed: say where
        raise user_error(f"model factory {spec!r} failed (called with {kwargs or 'no arguments'})", e) from e
    if not isinstance(got, tuple) or len(got) != 3:
        n = f" of {len(got)} items" if isinstance(got, (tuple, list)) else ""
        raise CommschedError(f"{spec!r} must return (model, example_inputs, loss_fn), got a {type(got).__name__}{n}")
    model, inputs, loss_fn = got
    if not isinstance(model, nn.Module):
        raise CommschedError(f"{spec!r} returned a model that is not an nn.Module: {type(model).__name__}")
    inputs = as_inputs(inputs, f"the example inputs {spec!r} returned")
    check_loss(loss_fn, f"{spec!r} returned a loss")
    materialize_lazy(model, inputs, loss_fn, spec)
    if "batch_size" in kwargs:
        batch = batch_size
    else:  # the factory's own batch: its first input tensor's leading dimension
        batch = batch_of(inputs)
    return Built(model, inputs, loss_fn, batch, kwargs.get("image_size"), kwargs.get("device"))


def materialize_lazy(model: nn.Module, inputs: object, loss_fn: Callable, spec: str) -> None:
    """Give a model's lazy modules (``nn.LazyLinear``, ...) their parameters by one forward pass of
    its example inputs and the loss without gradients, in eval mode (no batch-norm statistics move), every
    module's mode then restored. Copies, memory estimates and DDP need the shapes (DDP refuses a
    model with uninitialised parameters). A model without lazy modules is not run, nor its
    ``inputs`` read (:func:`~commsched.models.inputs.as_inputs` only then)."""
    if not lazy_names(model):
        return
    inputs = as_inputs(inputs)
    modes = [(m, m.training) for m in model.modules()]
    loss_error = None
    try:
        model.eval()
        with torch.no_grad():
            out = call_with(model, inputs)
            try:  # the loss too, for a lazy head it applies (an lm_head in the loss); in eval mode it may not run
                loss_fn(out)
            except Exception as e:  # noqa: BLE001 - an error only where lazy parameters are left
                loss_error = e
    except Exception as e:  # noqa: BLE001 - the user's forward failed: say where
        raise user_error(f"model {spec!r} failed on its example inputs (a forward pass that initialises its lazy modules)", e) from e
    finally:
        for m, training in modes:
            m.training = training
    lazy = lazy_names(model)
    if lazy and loss_error is not None:
        raise user_error(f"model {spec!r}'s loss failed on its output (in eval mode, without gradients, to initialise its lazy "
                      f"modules {few(lazy)})", loss_error) from loss_error
    if lazy:
        raise CommschedError(f"model {spec!r} has lazy parameters its example inputs and loss do not initialise ({few(lazy)})")


def ignored_note(spec: str, built: Built, batch_size: int | None, image_size: int | None) -> str:
    """A note naming ``--batch-size`` / ``--image-size`` values a factory did not take (it made its
    own inputs), or "" when it took every one given."""
    ignored = [(k, v) for k, v, got in (("batch_size", batch_size, built.batch_size), ("image_size", image_size, built.image_size))
               if v is not None and v != got]
    if not ignored:
        return ""
    flags = ", ".join("--" + k.replace("_", "-") + f" {v}" for k, v in ignored)
    # the batch is read from the first input's leading dimension: a sequence-first input gives its length
    read = ", its first input's leading dimension" if any(k == "batch_size" for k, _ in ignored) else ""
    return (f"note: {spec} takes no {' or '.join(k for k, _ in ignored)}: the run is of its own inputs "
            f"(batch {built.batch_size}{read}), not {flags}")


def check_every_gradient(spec: str, model: nn.Module, have: Iterable[str], what: str, plan_for: bool = True) -> None:
    """An error naming the trainable parameters that got no gradient from the example inputs: ``what``
    (a plan, validate) assumes DDP without ``find_unused_parameters``, whose buckets wait for every
    one; the way out names ``plan_for`` where a plan is what was asked for."""
    unused = without_gradient(model, have)
    if unused:
        raise CommschedError(
            f"{len(unused)} trainable parameter(s) of {spec} got no gradient from its example inputs ({few(unused)}): {what} "
            "assumes DDP without find_unused_parameters, so every trainable parameter must get one (freeze the unused ones, "
            "or tune the job itself: commsched.DataParallel(model, tune=True, find_unused_parameters=True)"
            + (", or plan in it: commsched.plan_for(..., find_unused_parameters=True))" if plan_for else ")")
        )


def dtypes_note(spec: str, dtypes: Iterable[str]) -> str:
    """A note where gradients have several dtypes: DDP buckets each apart, which the planners do not
    model (docs/limitations.md), or "" where they share one."""
    kinds = sorted(set(dtypes))
    if len(kinds) < 2:
        return ""
    return (f"note: {spec}'s gradients have {len(kinds)} dtypes ({', '.join(kinds)}): stock DDP buckets each dtype "
            "apart, which the plans and the ddp row here do not model (ddp_options warns where a plan's bucket mixes them)")


def forked_rng() -> contextlib.AbstractContextManager:
    """torch's generators (the CPU's and every visible GPU's) restored on exit: :func:`build` seeds
    them, and a library call must leave its caller's draws as they were."""
    return torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else [])


@contextmanager
def runs_on(spec: str, inputs: Inputs) -> Iterator[None]:
    """A zoo model's input errors named (:func:`commsched.models.zoo.runs_on`); an import path's own
    errors pass through with the path named."""
    if not is_import_path(spec):
        from commsched.models.zoo import runs_on as zoo_runs_on

        with zoo_runs_on(spec, inputs):
            yield
        return
    try:
        yield
    except CommschedError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's forward or loss failed, whatever it raised: say where
        raise user_error(f"model {spec!r} failed on its example inputs", e) from e
