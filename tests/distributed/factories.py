"""Model factories for ``commsched validate --model tests.distributed.factories:NAME`` (import-path models)."""

from __future__ import annotations

import torch
from torch import nn


class TinyTiedLM(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mix(self.emb(tokens))))


def tiny_tied_lm(batch_size: int = 4):
    tokens = torch.randint(0, 64, (batch_size, 9), generator=torch.Generator().manual_seed(0))
    return TinyTiedLM(), tokens[:, :-1], lambda out: nn.functional.cross_entropy(out.reshape(-1, 64), tokens[:, 1:].reshape(-1))


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
