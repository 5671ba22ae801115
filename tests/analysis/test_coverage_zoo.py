"""Coverage traces what the emulator runs on public-model patterns: factories with data on the device
(HF's DynamicCache, diffusers' Python-number timesteps), and a model it cannot trace is exit 2, never
the 1 of "would not run"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from torch_fl.analysis.coverage import coverage
from torch_fl.analysis.model import load_model
from torch_fl.cli import main

HERE = Path(__file__).resolve()


class _CachePositions(nn.Module):
    """What HF decoders do every forward with use_cache=True: cache positions made from Python data on
    the input's device, and a timestep given as a Python number, as diffusers takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, tokens: torch.Tensor, timestep: int = 3) -> torch.Tensor:
        positions = torch.tensor(list(range(tokens.shape[1])), device=tokens.device)
        scale = torch.tensor([timestep], dtype=torch.float32, device=tokens.device)
        return self.proj(self.emb(tokens) + self.emb(positions)) * scale


def cache_positions():
    torch.manual_seed(0)
    return _CachePositions(), (torch.randint(0, 32, (2, 5)), 3)


class _Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.block = _Fails()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.inner(x))


class _Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this block cannot run")


def broken():
    return _Broken(), (torch.randn(2, 4),)


@pytest.mark.parametrize("device", ["emu:cuda", "emu:mps", "cuda"])
def test_data_factories_on_the_device_are_traced(device):
    data = coverage(load_model(f"{HERE}:cache_positions"), device, train=True).data
    assert data["summary"]["unsupported_calls"] == 0
    ops = {op["op"] for op in data["ops"]}
    assert "aten::embedding.default" in ops and "aten::mul.Tensor" in ops


def test_a_model_that_cannot_be_traced_exits_2_naming_the_module(capsys):
    assert main(["coverage", f"{HERE}:broken", "--device", "emu:cuda", "--train"]) == 2
    err = capsys.readouterr().err
    assert "could not trace" in err and "'block'" in err and "this block cannot run" in err
    # --strict keeps 1 for "would not run", and a model that could not be traced is neither
    assert main(["coverage", f"{HERE}:broken", "--device", "emu:cuda", "--strict"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "unet2d_condition"])
def test_public_models_trace_on_the_emulated_device(name):
    # tiny random configs of transformers/diffusers models (scripts/model_zoo.py), their default cache
    entry = f"{HERE.parents[2] / 'scripts' / 'model_zoo.py'}:{name}"
    data = coverage(load_model(entry), "emu:cuda", train=True).data
    assert data["summary"]["traced_on"] == "fake tensors" and data["summary"]["unsupported_calls"] == 0
