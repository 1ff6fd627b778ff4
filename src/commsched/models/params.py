"""The parameters DDP reduces, by name, and which of them a step left without a gradient."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from torch import nn

from commsched.errors import CommschedError


def check_module(obj: object, where: str) -> None:
    """``obj`` must be the model itself, a ``torch.nn.Module``."""
    if not isinstance(obj, nn.Module):
        from commsched.types import shown

        raise CommschedError(f"{where} takes the model as a torch.nn.Module, got {type(obj).__name__} {shown(obj)}")


def ignored_names(module: nn.Module) -> set[str]:
    """Parameters and buffers DDP is told to leave alone (``_set_params_and_buffers_to_ignore_for_model``)."""
    return set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()) or ())


def trainable_parameters(module: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters DDP reduces, by name: trainable, not ignored, shared ones once
    (named_parameters already dedupes)."""
    ignored = ignored_names(module)
    params = {n: p for n, p in module.named_parameters() if p.requires_grad and n not in ignored}
    lazy = [n for n in lazy_names(module) if n in params]
    if lazy:  # their sizes are not known yet (DDP refuses them too)
        raise CommschedError(f"the model has lazy parameters not initialised yet ({few(lazy)}): run a forward pass (and the loss) first")
    return params


def lazy_names(module: nn.Module) -> list[str]:
    """The parameters and buffers of lazy modules (``nn.LazyLinear``, ...) not initialised yet, by name."""
    from torch.nn.parameter import is_lazy

    return [n for n, t in (*module.named_parameters(), *module.named_buffers()) if is_lazy(t)]


def without_gradient(module: nn.Module, have: Iterable[str]) -> list[str]:
    """The parameters DDP reduces (with elements) that are not among ``have``, the gradients a step produced."""
    got = set(have)
    return [n for n, p in trainable_parameters(module).items() if p.numel() and n not in got]


def few(names: Sequence[str], k: int = 3) -> str:
    """The first ``k`` names and how many more, for an error message."""
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")
