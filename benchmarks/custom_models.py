"""Models that are not in commsched's zoo, written as a user would, each a factory for
``commsched validate --model benchmarks.custom_models:NAME`` and ``benchmarks/tune_emulated.py``:
``factory(batch_size) -> (model, example_inputs, loss_fn)``.

- ``tied_lm``: a GPT-style language model (4 pre-norm transformer layers, width 256, 8k vocabulary)
  whose output projection is its token embedding (tied: one parameter, two uses);
- ``mixed_mlp``: a wide MLP with its middle layers in bfloat16 and the rest in float32 (DDP
  buckets each dtype apart);
- ``gated_experts``: a small mixture of experts (4 expert MLPs, top-1 routing by a hashed token
  id), so some experts get no gradient in some steps: trained with ``find_unused_parameters=True``;
- ``lstm_lm``: a recurrent language model (an 8k-word embedding, 2 LSTM layers of 512, an untied
  output layer): 11 tensors, 48 MiB, the embedding and the output layer 16 MiB each; its backward
  is a scan back through time, each LSTM layer's weights ready only at its end;
- ``seq2seq``: an encoder-decoder transformer (``nn.Transformer``: 2 + 2 layers of width 256)
  translating between two 8k vocabularies, with its own source and target embeddings and an untied
  output layer: three 8 MiB tensors among about 100 small ones, the source embedding ready last.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, WIDTH, SEQ = 8192, 256, 64


class TiedLM(nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.zeros(SEQ, WIDTH))
        block = nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.pos[: tokens.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


def tied_lm(batch_size: int = 8):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g)
    model = TiedLM()

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    return model, (tokens[:, :-1],), loss_fn


class MixedMLP(nn.Module):
    def __init__(self, width: int = 1536, depth: int = 6) -> None:
        super().__init__()
        self.inp = nn.Linear(3 * 32 * 32, width)
        self.mid = nn.ModuleList(nn.Linear(width, width).to(torch.bfloat16) for _ in range(depth))
        self.out = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x.flatten(1))).to(torch.bfloat16)
        for layer in self.mid:
            h = torch.relu(layer(h))
        return self.out(h.float())


def mixed_mlp(batch_size: int = 32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (batch_size,), generator=g)
    return MixedMLP(), (x,), lambda out: nn.functional.cross_entropy(out, y)


class GatedExperts(nn.Module):
    def __init__(self, experts: int = 4, width: int = 512) -> None:
        super().__init__()
        self.inp = nn.Linear(3 * 32 * 32, width)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width)) for _ in range(experts))
        self.out = nn.Linear(width, 10)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x.flatten(1)))
        self.calls += 1
        expert = self.experts[(self.calls * 7) % len(self.experts)]  # one expert per step: the others get no gradient
        return self.out(h + expert(h))


def gated_experts(batch_size: int = 32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (batch_size,), generator=g)
    return GatedExperts(), (x,), lambda out: nn.functional.cross_entropy(out, y)


class LSTMLM(nn.Module):
    def __init__(self, width: int = 512, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, width)
        self.rnn = nn.LSTM(width, width, layers, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(tokens))[0])


def lstm_lm(batch_size: int = 8):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ // 2 + 1), generator=g)
    model = LSTMLM()

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    return model, (tokens[:, :-1],), loss_fn


class Seq2Seq(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, WIDTH)
        self.tgt_emb = nn.Embedding(VOCAB, WIDTH)
        self.core = nn.Transformer(WIDTH, 8, layers, layers, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.head(self.core(self.src_emb(src), self.tgt_emb(tgt), tgt_mask=mask, tgt_is_causal=True))


def seq2seq(batch_size: int = 8):
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, VOCAB, (batch_size, SEQ), generator=g)
    tgt = torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g)
    model = Seq2Seq()

    def loss_fn(logits: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))

    return model, (src, tgt[:, :-1]), loss_fn
