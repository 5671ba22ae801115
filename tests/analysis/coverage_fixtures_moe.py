"""Small models of what coverage could not trace on an emulated chip (issue 29 item 5), as model entry
points (``(model, inputs[, loss_fn])``, the factory contract of torch_fl.analysis.model).

- last_token:  indexing with Python lists (``lin(x)[..., [-1], :]``, HF Falcon's last-token slice; a list
               index written to with ``__setitem__``; a list of bools as a mask). PyTorch's C++ indexing
               makes the index tensor on the device below the Python key, which the emulated backend's
               fake tensors could not serve (an INTERNAL ASSERT in python_dispatch).
- grouped_moe: a mixture of experts as HF's grouped_mm experts run it off the CPU
               (transformers.integrations.moe): softmax + topk routing, int32 histc for the tokens per
               expert, cumsum offsets, ``torch._grouped_mm`` on float32 forward and backward. The meta
               kernel of _grouped_mm accepts bfloat16 alone ("Expected inputs of BF16 type").
- hf_mixtral:  HF MixtralForCausalLM, tiny random config (needs transformers).
- hf_falcon:   HF FalconForCausalLM, tiny random config (needs transformers).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _LastToken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        last = h[..., [-1], :]                      # (B, 1, 8)
        picked = h[:, [0, 2]]                       # a top-level list: one index tensor
        kept = h[:, [True, False, True, False, True]]  # a list of bools: a mask
        mixed = h.clone()
        mixed[:, [1, 3]] = last.expand(-1, 2, -1)   # written through a list index
        return self.head(last + picked.sum(1, keepdim=True) + kept.mean(1, keepdim=True)
                         + mixed.mean(1, keepdim=True))


def last_token():
    torch.manual_seed(0)
    return _LastToken(), (torch.randn(2, 5, 8),)


class _GroupedMoE(nn.Module):
    def __init__(self, dim: int = 16, hidden: int = 32, experts: int = 4, top_k: int = 2) -> None:
        super().__init__()
        self.experts, self.top_k = experts, top_k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, dim, hidden) * 0.1)
        self.down = nn.Parameter(torch.randn(experts, hidden, dim) * 0.1)
        self.head = nn.Linear(dim, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        weights, chosen = torch.topk(F.softmax(self.gate(tokens), dim=-1), self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        routed = tokens.repeat_interleave(self.top_k, dim=0)[order]
        counts = torch.histc(flat.int(), bins=self.experts, min=0, max=self.experts - 1)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        hidden = F.silu(torch._grouped_mm(routed, self.up, offs=offs))
        out = torch._grouped_mm(hidden, self.down, offs=offs)
        back = torch.empty_like(out)
        back[order] = out
        mixed = (back.reshape(tokens.shape[0], self.top_k, -1) * weights.unsqueeze(-1)).sum(1)
        return self.head(mixed.reshape(x.shape))


def grouped_moe():
    torch.manual_seed(0)
    return _GroupedMoE(), (torch.randn(2, 6, 16),)


def _causal_lm_loss(output, *inputs):
    return output.logits.float().mean()


def hf_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=32)
    return MixtralForCausalLM(config), (torch.randint(0, 64, (2, 6)),), _causal_lm_loss


def hf_falcon():
    from transformers import FalconConfig, FalconForCausalLM

    torch.manual_seed(0)
    config = FalconConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                          max_position_embeddings=32)
    return FalconForCausalLM(config), (torch.randint(0, 64, (2, 6)),), _causal_lm_loss
