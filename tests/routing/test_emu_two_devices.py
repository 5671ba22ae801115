"""Two emulated devices in one process (routing/emu/engine.py): a model split across them trains, forward
and backward, with the gradients and the updated weights of the same model on the CPU."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import torch_fl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def two(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    monkeypatch.setenv("FL_EMU_DEVICES", "2")
    torch_fl.reset()
    devices = torch_fl.devices()
    assert len(devices) == 2
    return devices


class Split(torch.nn.Module):
    """A model-parallel model: its first stage on one device, its second on another (None: the CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
        self.second = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        self.places: tuple = ("cpu", "cpu")
        self.reentrant = False

    def place(self, first: torch.device, second: torch.device) -> Split:
        self.first.to(first)
        self.second.to(second)
        self.places = (first, second)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x.to(self.places[0]))
        if self.reentrant:  # activation checkpointing: a backward inside the backward
            h = checkpoint(self.second[0], h.to(self.places[1]), use_reentrant=True)
            return self.second[2](self.second[1](h))
        return self.second(h.to(self.places[1]))


def _train(model: Split, steps: int = 3) -> tuple[list[float], dict, dict]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    losses, grads = [], {}
    for _ in range(steps):
        x = torch.randn(5, 6, generator=generator)
        target = torch.randint(0, 3, (5,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x), target.to(model.places[1]))
        opt.zero_grad()
        loss.backward()
        grads = {name: p.grad.detach().cpu() for name, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    weights = {name: p.detach().cpu() for name, p in model.named_parameters()}
    return losses, grads, weights


@pytest.mark.parametrize("reentrant", [False, True], ids=["plain", "checkpointed"])
def test_a_model_split_across_two_devices_trains_as_on_the_cpu(two, reentrant):
    torch.manual_seed(0)
    host = Split()
    host.reentrant = reentrant
    split = copy.deepcopy(host).place(*two)
    assert {p.device for p in split.first.parameters()} == {two[0]}
    assert {p.device for p in split.second.parameters()} == {two[1]}
    expected = _train(host)
    got = _train(split)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_autograd_grad_across_devices_equals_the_cpu(two):
    d0, d1 = two
    x = torch.linspace(-1, 1, 6, requires_grad=True)
    w = torch.arange(6.0, requires_grad=True)
    xd = x.detach().to(d0).requires_grad_()
    wd = w.detach().to(d1).requires_grad_()
    expected = torch.autograd.grad((x.sin() * w).pow(2).sum(), (x, w), create_graph=True)
    got = torch.autograd.grad((xd.sin().to(d1) * wd).pow(2).sum(), (xd, wd), create_graph=True)
    assert (got[0].device, got[1].device) == (d0, d1)
    torch.testing.assert_close([g.cpu() for g in got], list(expected))
    # a second-order gradient through the same graph, back across the devices
    (second,) = torch.autograd.grad(got[1].sum(), xd)
    (second_expected,) = torch.autograd.grad(expected[1].sum(), x)
    torch.testing.assert_close(second.cpu(), second_expected)


def test_one_device_runs_backward_on_the_calling_thread():
    # one emulated device too: the engine's device thread cost two hand-offs per backward and bought nothing
    # (routing/emu/engine.py); the user's own setting is left alone
    import threading

    with torch_fl.emulate("cuda") as activation:
        seen = []
        x = torch.ones(3, device=activation.device, requires_grad=True)
        y = x * 2
        y.register_hook(lambda grad: seen.append(threading.current_thread() is threading.main_thread()))
        y.sum().backward()
        assert seen == [True] and x.grad.cpu().tolist() == [2.0, 2.0, 2.0]
        assert torch._C._is_multithreading_enabled()  # (restored after the backward)


# Under the vendor's name (npu:0, npu:1), in a process of its own -----------------------------------------
NPU = r'''
import copy, json, torch, torch_fl
torch.manual_seed(0)
first, second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
host = [copy.deepcopy(first), copy.deepcopy(second)]
first.npu(0); second.to("npu:1")
x = torch.randn(3, 4)
loss = second(torch.relu(first(x.npu())).to("npu:1")).sum()
loss.backward()
ref = host[1](torch.relu(host[0](x))).sum()
ref.backward()
pairs = [(first.weight, host[0].weight), (first.bias, host[0].bias), (second.weight, host[1].weight)]
print(json.dumps({"devices": [str(first.weight.grad.device), str(second.weight.grad.device)],
                  "equal": all(torch.allclose(a.grad.cpu(), b.grad) for a, b in pairs)}))
'''


def test_backward_across_npu0_and_npu1():
    done = subprocess.run([sys.executable, "-c", NPU], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "FL_DEVICE": "emu:npu", "FL_EMU_DEVICES": "2", "OMP_NUM_THREADS": "1"},
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"devices": ["npu:0", "npu:1"], "equal": True}
