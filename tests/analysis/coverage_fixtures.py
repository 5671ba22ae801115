"""Small models of the public patterns that coverage got wrong (issue 12), as model entry points.

Each ``name()`` follows the factory contract of torch_fl.analysis.model: ``(model, inputs[, loss_fn])``.
The patterns, and where they come from:

- dropout:       nn.Dropout in training (every transformer: minGPT, nanoGPT, pytorch/examples'
                 word_language_model); on the CPU it runs as empty_like + bernoulli_ + div_ + mul.
- empty_like:    a model calling torch.empty_like itself (its translation calls empty_permuted).
- encoder:       nn.TransformerEncoder with a causal mask (word_language_model's TransformerModel):
                 PyTorch's own _detect_is_causal_mask branches on the mask's values.
- lstm:          a two-layer nn.LSTM language model with dropout (word_language_model's RNNModel).
- sampled_gpt:   a GPT whose batch is sampled on the host with a CPU generator (nanoGPT's get_batch).
- closure_mlp:   a block that reaches its submodules through a lambda (minGPT's
                 ``self.mlpf = lambda x: m.c_proj(m.dropout(m.act(m.c_fc(x))))``): a copy of the model
                 would keep calling the original's parameters.
- cached_mask:   a transformer that caches its mask on the module after moving it
                 (word_language_model's ``self.src_mask = mask``): the trace must leave no tensor behind.
- lstm_hidden:   an LSTM whose initial state is a tuple argument (word_language_model's init_hidden).
- parametrized:  weight_norm and spectral_norm parametrizations, a submodule registered under two names
                 and a non-persistent buffer: the trace swaps its stand-ins in and out of all of them.
- host_sampling: a model that samples on the host inside forward (a CPU generator's randperm, then
                 ``.to(x.device)``), as data-augmenting and token-dropping models do: host work.

At the end, the small models the profile, bench, grade and ops-bench tests run (tests/analysis/conftest.py's
``models`` names this file): mlp, log_softmax, wide_gelu, bf16 (which emu:minimal cannot run), small (a
one-layer GPT of examples/gpt.py) and leaky (small, keeping 4 MiB per step).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _Dropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def dropout():
    torch.manual_seed(0)
    return _Dropout(), (torch.randn(8, 16),)


class _EmptyLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffer = torch.empty_like(x)
        buffer.copy_(x)
        return self.fc(buffer)


def empty_like():
    torch.manual_seed(0)
    return _EmptyLike(), (torch.randn(8, 16),)


class _Encoder(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.head(self.encoder(x, mask=mask))


def encoder():
    torch.manual_seed(0)
    return _Encoder(), (torch.randn(2, 7, 32),)


class _LSTM(nn.Module):
    def __init__(self, vocab: int = 50) -> None:
        super().__init__()
        self.embed, self.drop = nn.Embedding(vocab, 16), nn.Dropout(0.2)
        self.rnn = nn.LSTM(16, 32, 2, dropout=0.2)
        self.decoder = nn.Linear(32, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.drop(self.embed(x)))
        return self.decoder(self.drop(out))


def lstm():
    torch.manual_seed(0)
    return _LSTM(), (torch.randint(0, 50, (6, 3)),)


def _gpt():
    """(GPT, lm_loss) of examples/gpt.py."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        from gpt import GPT, lm_loss
    finally:
        sys.path.pop(0)
    return GPT, lm_loss


def sampled_gpt():
    GPT, lm_loss = _gpt()
    generator = torch.Generator().manual_seed(0)
    data = torch.randint(0, 256, (2048,), generator=generator)  # a tokenised corpus, on the host
    starts = torch.randint(len(data) - 33, (4,), generator=generator)
    batch = torch.stack([data[i:i + 32] for i in starts.tolist()])
    torch.manual_seed(0)
    return GPT(vocab=256, dim=64, heads=4, layers=2, context=32), (batch,), lm_loss


class _ClosureMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.ModuleDict({"fc": nn.Linear(16, 64), "act": nn.GELU(), "proj": nn.Linear(64, 16),
                                  "drop": nn.Dropout(0.1)})
        m = self.mlp
        self.mlpf = lambda x: m.drop(m.proj(m.act(m.fc(x))))
        self.ln = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlpf(self.ln(x))


def closure_mlp():
    torch.manual_seed(0)
    return _ClosureMLP(), (torch.randn(4, 8, 16),)


class _CachedMask(nn.Module):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 2, 64, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.src_mask: torch.Tensor | None = None

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            mask = torch.log(torch.tril(torch.ones(len(src), len(src))))  # built on the host, then moved
            self.src_mask = mask.to(src.device)
        return self.encoder(src, mask=self.src_mask)


def cached_mask():
    torch.manual_seed(0)
    return _CachedMask(), (torch.randn(7, 3, 32),)


class _LSTMHidden(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.decoder = nn.LSTM(8, 16, 1), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out, _ = self.rnn(x, hidden)
        return self.decoder(out)


def lstm_hidden():
    torch.manual_seed(0)
    return _LSTMHidden(), (torch.randn(5, 2, 8), (torch.zeros(1, 2, 16), torch.zeros(1, 2, 16)))


class _HostSampling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(64, 16), nn.Linear(16, 64)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        keep = torch.randperm(tokens.shape[1], generator=self.generator)[: tokens.shape[1] // 2]
        keep = keep.sort().values.to(tokens.device)  # sampled and sorted on the host, then moved
        return self.head(self.embed(tokens.index_select(1, keep)))


def host_sampling():
    torch.manual_seed(0)
    return _HostSampling(), (torch.randint(0, 64, (4, 12)),)


class _Parametrized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from torch.nn.utils.parametrizations import spectral_norm, weight_norm

        self.a, self.b = weight_norm(nn.Linear(8, 8)), spectral_norm(nn.Linear(8, 8))
        self.register_buffer("scale", torch.ones(8), persistent=False)
        self.shared = nn.Linear(8, 8)
        self.again = self.shared  # one module, two names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.again(self.b(self.a(x)) * self.scale) + self.shared(x)


def parametrized():
    torch.manual_seed(0)
    return _Parametrized(), (torch.randn(4, 8),)


# the models of the profile, bench, grade and ops-bench tests ---------------------------------------------
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), (torch.randn(8, 16),)


def log_softmax():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.LogSoftmax(dim=-1)), (torch.randn(256, 64),)


def wide_gelu():
    # a gelu of 1M elements: its CPU kernel takes milliseconds on one thread
    return nn.GELU(), (torch.randn(512, 2048),)


def bf16():
    return nn.Linear(8, 8).to(torch.bfloat16), (torch.randn(4, 8, dtype=torch.bfloat16),)


def small():
    GPT, lm_loss = _gpt()
    torch.manual_seed(0)
    return GPT(vocab=64, dim=32, heads=2, layers=1, context=16), (torch.randint(0, 64, (2, 16)),), lm_loss


LEAKED: list[torch.Tensor] = []


class _Leaky(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        LEAKED.append(torch.randn(1 << 20))  # 4 MiB written and never freed
        return self.inner(idx)


def leaky():
    model, inputs, loss = small()
    return _Leaky(model), inputs, loss
