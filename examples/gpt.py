"""A small GPT-style language model (causal self-attention, pre-norm blocks, tied embeddings).

Model entry point contract (used by `torchfl coverage/compare/bench/grade examples/gpt.py:factory`):
``factory()`` returns ``(model, example_inputs)`` or ``(model, example_inputs, loss_fn)``, where
``example_inputs`` is a tuple of positional arguments and ``loss_fn(output, *example_inputs)`` returns
a scalar loss.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, dim: int = 128, heads: int = 4, layers: int = 2, context: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def lm_loss(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))


def factory(batch: int = 8, context: int = 64, vocab: int = 512):
    torch.manual_seed(0)
    model = GPT(vocab=vocab, context=context)
    tokens = torch.randint(0, vocab, (batch, context))
    return model, (tokens,), lm_loss
