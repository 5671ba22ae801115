"""A small classifier whose forward uses operators that accelerators often lack.

``index_put_`` (on a clone of a buffer), ``nonzero`` (a data-dependent output shape), ``bucketize``,
an FFT (``torch.fft.rfft``) and a custom ``torch.autograd.Function``, around ordinary layers so that it
trains. Entry point: ``torchfl coverage examples/unusual.py:factory --device emu:minimal --train``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class BandClamp(torch.autograd.Function):
    """Clamp to [0, 1] forward; pass gradients through inside a wider band (a straight-through estimator)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(0.0, 1.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * ((x > -1.0) & (x < 2.0)).to(grad.dtype)


class Bucketed(nn.Module):
    """Adds a learned embedding of each row's bucketized mean, scaled by how full its bucket is."""

    def __init__(self, features: int, bins: int):
        super().__init__()
        self.register_buffer("boundaries", torch.linspace(-1.0, 1.0, bins - 1))
        self.register_buffer("prior", torch.ones(bins))
        self.embed = nn.Embedding(bins, features)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        bins = torch.bucketize(h.mean(-1).detach(), self.boundaries)
        counts = self.prior.clone()  # a clone: the buffer itself must stay the same across calls
        counts.index_put_((bins,), torch.ones_like(bins, dtype=counts.dtype), accumulate=True)
        return h + self.embed(bins) / counts[bins].unsqueeze(-1)


class Spectral(nn.Module):
    """Mixes in the magnitude spectrum of each row."""

    def __init__(self, features: int):
        super().__init__()
        self.mix = nn.Linear(features // 2 + 1, features)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mix(torch.fft.rfft(h, dim=-1).abs())


class PositivePool(nn.Module):
    """Adds the mean of the rows whose sum is positive: `nonzero` gives a data-dependent row count."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        rows = torch.nonzero(h.sum(-1) > 0).squeeze(1)
        picked = h.index_select(0, rows)
        return h + picked.sum(0) / h.shape[0]


class Unusual(nn.Module):
    def __init__(self, features: int = 16, classes: int = 4, bins: int = 8):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.bucketed = Bucketed(features, bins)
        self.spectral = Spectral(features)
        self.pool = PositivePool()
        self.head = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.spectral(self.bucketed(self.proj(x))))
        return self.head(BandClamp.apply(h))


def factory(batch: int = 32, features: int = 16, classes: int = 4):
    torch.manual_seed(0)
    model = Unusual(features, classes)
    x = torch.randn(batch, features)
    labels = torch.randint(0, classes, (batch,))

    def loss_fn(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels.to(logits.device))  # the labels live on the host

    return model, (x,), loss_fn
