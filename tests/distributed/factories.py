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
