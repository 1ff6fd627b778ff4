"""Model factories for ``commsched validate --model tests.distributed.factories:NAME`` (import-path models)."""

from __future__ import annotations

import torch
from torch import nn


class TinyTiedLM(nn.Module):
    """Its forward takes its inputs by keyword, as Hugging Face models do."""

    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.head(torch.tanh(self.mix(h)))


def tiny_tied_lm(batch_size: int = 4):
    """Example inputs by keyword (a dict), with a padding mask."""
    tokens = torch.randint(0, 64, (batch_size, 9), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": tokens[:, :-1], "attention_mask": torch.ones(batch_size, 8)}
    return TinyTiedLM(), inputs, lambda out: nn.functional.cross_entropy(out.reshape(-1, 64), tokens[:, 1:].reshape(-1))


def not_a_triple():
    return nn.Linear(2, 2)


class WithUnused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(8, 4)
        self.spare = nn.Linear(8, 4)  # never called

    def forward(self, x):
        return self.used(x)


def with_unused():
    """No batch_size argument: the factory's own batch of 4."""
    return WithUnused(), torch.randn(4, 8, generator=torch.Generator().manual_seed(0)), lambda out: out.sum()


# --- models a user may bring that commsched cannot plan, or plans with a note (tests/unit/test_user_model_errors.py)


def key_in_loss(batch_size: int = 4):
    """The loss reads a key the output has not: the user's own bug, reported with its line."""
    return nn.Linear(8, 4), torch.randn(batch_size, 8), lambda out: {"hidden": out}["logits"].sum()


class _Asserts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        assert x.shape[1] == 9, "expected 9 features"
        return self.lin(x)


def asserts_in_forward(batch_size: int = 4):
    return _Asserts(), torch.randn(batch_size, 8), lambda out: out.sum()


class _SparseEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 8, sparse=True)
        self.lin = nn.Linear(8, 1)

    def forward(self, ids):
        return self.lin(self.emb(ids))


def sparse_embedding(batch_size: int = 4):
    return _SparseEmbedding(), torch.randint(0, 100, (batch_size, 5), generator=torch.Generator().manual_seed(0)), lambda out: out.sum()


class _Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16).to(torch.bfloat16)

    def forward(self, x):
        return self.b(self.a(x).to(torch.bfloat16)).float()


def mixed_dtypes(batch_size: int = 4):
    return _Mixed(), torch.randn(batch_size, 16), lambda out: out.sum()


class _ListOfImages(nn.Module):
    """Takes a list of tensors, as torchvision's detection models do: no tensor holds the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, images):
        return torch.stack([self.conv(x).mean() for x in images])


def list_of_images(batch_size: int = 2, image_size: int = 16):
    return _ListOfImages(), ([torch.randn(3, image_size, image_size) for _ in range(batch_size)],), lambda out: out.sum()


class _WithEmptyParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(8, 8)
        self.empty = nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return self.l(x) + self.empty.sum()


def empty_parameter(batch_size: int = 4):
    """A used parameter without elements (a probe's): the measured profile dropped it, the estimate
    refused its 0 bytes, and the plan then left it out."""
    return _WithEmptyParameter(), torch.randn(batch_size, 8), lambda out: out.pow(2).mean()


class ClipLike(nn.Module):
    """Two towers, one of them lazy; the temperature is applied by the loss, as CLIP's is; and a
    lock, which deepcopy cannot copy."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.image = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Linear(16, 8))
        self.text = nn.Sequential(nn.Embedding(32, 8), nn.Flatten(), nn.Linear(48, 8))
        self.logit_scale = nn.Parameter(torch.tensor(2.0))
        self.lock = threading.Lock()

    def forward(self, pixels, tokens):
        with self.lock:
            return nn.functional.normalize(self.image(pixels), dim=-1), nn.functional.normalize(self.text(tokens), dim=-1)


def clip_like(batch_size: int = 4):
    g = torch.Generator().manual_seed(0)
    model = ClipLike()
    inputs = (torch.randn(batch_size, 12, generator=g), torch.randint(0, 32, (batch_size, 6), generator=g))

    def loss(out):
        image, text = out
        logits = model.logit_scale.exp() * image @ text.t()
        labels = torch.arange(logits.shape[0])
        return (nn.functional.cross_entropy(logits, labels) + nn.functional.cross_entropy(logits.t(), labels)) / 2

    return model, inputs, loss


def fails_later(batch_size: int = 4):
    """A loss that fails at its 20th call (its labels run out, say): past the checks that run the
    model first, in the profile steps or the probes. It was a traceback on every rank."""
    calls = []

    def loss(out):
        calls.append(1)
        if len(calls) >= 20:
            raise ValueError("labels exhausted")
        return out.square().mean()

    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)), torch.randn(batch_size, 8), loss
