"""One forward's example inputs, as the model takes them: positionally (a tuple, or one tensor) or
by keyword (a dict of names to values, as Hugging Face models take ``input_ids=...,
attention_mask=...``).

Every place that runs a user's model on its example inputs (profiling, the inventory, ``plan_for``,
``validate``) calls it through :func:`call_with`, so both kinds work alike; the batch is read from the
first tensor with a batch dimension, positional or keyword in the dict's order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from commsched.errors import CommschedError

Inputs = tuple | dict[str, Any]


def as_inputs(inputs: object, what: str = "example_inputs") -> Inputs:
    """``inputs`` as a tuple (a tensor or a list becomes one) or a dict of keyword inputs; anything
    else, or a dict whose keys are not strings, is an error naming ``what`` and the type found."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs)
    if isinstance(inputs, Mapping):
        bad = [k for k in inputs if not isinstance(k, str)]
        if bad:
            raise CommschedError(f"{what} by keyword need names (strings) as keys, got {bad[0]!r}")
        return dict(inputs)
    raise CommschedError(
        f"{what} must be a tensor, a tuple of positional inputs or a dict of keyword inputs, got {type(inputs).__name__}"
    )


def call_with(module: nn.Module, inputs: Inputs) -> Any:
    """``module`` called on ``inputs``: ``module(**inputs)`` for a dict, else ``module(*inputs)``."""
    if isinstance(inputs, dict):
        return module(**inputs)
    return module(*inputs)


def tensors(inputs: Inputs) -> Iterator[torch.Tensor]:
    """The tensors among ``inputs``, in order (a dict's in its order); other values are skipped."""
    values = inputs.values() if isinstance(inputs, dict) else inputs
    return (x for x in values if isinstance(x, torch.Tensor))


def batch_of(inputs: Inputs) -> int | None:
    """The leading dimension of the first tensor in ``inputs`` that has one, or a ``PackedSequence``'s
    batch (its first time step's count: its data's leading dimension counts tokens), else None."""
    from torch.nn.utils.rnn import PackedSequence

    values = inputs.values() if isinstance(inputs, dict) else inputs
    for x in values:
        if isinstance(x, PackedSequence):
            return int(x.batch_sizes[0])
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            return int(x.shape[0])
    return None


def moved(inputs: Inputs, device: torch.device) -> Inputs:
    """``inputs`` with every tensor moved to ``device`` (other values as they are)."""
    from torch.nn.utils.rnn import PackedSequence

    def move(x: Any) -> Any:
        return x.to(device) if isinstance(x, (torch.Tensor, PackedSequence)) else x

    if isinstance(inputs, dict):
        return {k: move(v) for k, v in inputs.items()}
    return tuple(move(x) for x in inputs)


def check_loss(loss_fn: object, where: str) -> None:
    """``loss_fn`` must be a function commsched can call with the model's output alone (it returns
    the scalar to backpropagate); one that needs the targets too (``nn.CrossEntropyLoss()``) is named
    with the way to give them. A signature Python cannot read is taken as it is."""
    import inspect

    if not callable(loss_fn):
        from commsched.types import shown

        raise CommschedError(f"{where}: loss_fn must be a function of the model's output, got {type(loss_fn).__name__} {shown(loss_fn)}")
    if isinstance(loss_fn, nn.Module):
        # a module's __call__ takes anything and its forward says what it needs, unless something
        # between them gives the rest: its own __call__, or a forward pre-hook (its own or global)
        from torch.nn.modules import module as torch_module

        if type(loss_fn).__call__ is not nn.Module.__call__ or loss_fn._forward_pre_hooks or torch_module._global_forward_pre_hooks:
            return
        signature_of = loss_fn.forward
    else:
        signature_of = loss_fn
    try:
        # the function itself, not what a decorator wraps (functools.wraps): the wrapper may give the rest
        inspect.signature(signature_of, follow_wrapped=False).bind(object())
    except ValueError:  # no signature to read (some builtins)
        return
    except TypeError as e:
        raise CommschedError(
            f"{where}: loss_fn is called with the model's output alone ({e}): give it the targets itself, "
            "e.g. lambda out: F.cross_entropy(out, labels)"
        ) from None
