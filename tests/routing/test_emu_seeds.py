"""Randomness on the emulated device (routing/emu/rng.py): each device draws from a generator of its own,
seeded by torch.<chip>.manual_seed and torch.manual_seed, as a real accelerator's; its numbers are a CPU
generator's seeded the same way."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

REPO = Path(__file__).resolve().parents[2]

# Every random op a model or a vendor test calls on the device, without a generator of its own.
DRAWS = {
    "rand": lambda d: torch.rand(3, 4, device=d),
    "randn": lambda d: torch.randn(5, device=d),
    "randint": lambda d: torch.randint(0, 100, (6,), device=d),
    "randint_low": lambda d: torch.randint(-5, 5, (6,), device=d),
    "randperm": lambda d: torch.randperm(7, device=d),
    "uniform_": lambda d: torch.empty(4, device=d).uniform_(-1, 1),
    "normal_": lambda d: torch.empty(4, device=d).normal_(2.0, 3.0),
    "normal": lambda d: torch.normal(torch.zeros(3, device=d), torch.ones(3, device=d)),
    "bernoulli": lambda d: torch.bernoulli(torch.full((8,), 0.3, device=d)),
    "bernoulli_": lambda d: torch.empty(8, device=d).bernoulli_(0.7),
    "dropout": lambda d: F.dropout(torch.arange(1.0, 17.0, device=d), 0.5),
    "native_dropout": lambda d: torch.native_dropout(torch.arange(1.0, 17.0, device=d), 0.25, True)[1],
    "multinomial": lambda d: torch.multinomial(torch.arange(1.0, 6.0, device=d), 3),
    "exponential_": lambda d: torch.empty(3, device=d).exponential_(),
    "random_": lambda d: torch.empty(3, device=d).random_(0, 10),
    "geometric_": lambda d: torch.empty(3, device=d).geometric_(0.3),
    "rand_like": lambda d: torch.rand_like(torch.ones(2, 2, device=d)),
    "randn_like": lambda d: torch.randn_like(torch.ones(2, 2, device=d)),
    "randint_like": lambda d: torch.randint_like(torch.ones(4, device=d), 10),
    "poisson": lambda d: torch.poisson(torch.full((4,), 3.0, device=d)),
    "rrelu": lambda d: F.rrelu(torch.full((6,), -1.0, device=d), training=True),
}


def _host(values: dict) -> dict:
    return {name: value.cpu() for name, value in values.items()}


def _draw_all(where) -> dict:
    return {name: draw(where) for name, draw in DRAWS.items()}


def test_device_draws_equal_a_cpu_generator_seeded_alike(d):
    torch.emu.manual_seed(123)
    got = _host(_draw_all(d))
    torch.manual_seed(123)
    expected = _draw_all("cpu")
    for name in DRAWS:
        assert torch.equal(got[name], expected[name]), name


def test_host_draws_between_seeding_and_the_device_draw_change_nothing(d):
    for name, draw in DRAWS.items():
        torch.emu.manual_seed(7)
        alone = draw(d).cpu()
        torch.emu.manual_seed(7)
        torch.rand(5), torch.randn(3, 3), F.dropout(torch.ones(10), 0.5)  # host work in between
        assert torch.equal(draw(d).cpu(), alone), name


def test_device_draws_leave_the_host_generator_alone(d):
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    _draw_all(d)
    assert torch.equal(torch.rand(4), expected)


def test_torch_manual_seed_seeds_the_device_too(d):
    torch.manual_seed(5)
    first = _host(_draw_all(d))
    torch.manual_seed(5)
    torch.rand(3)
    again = _host(_draw_all(d))
    assert all(torch.equal(first[name], again[name]) for name in DRAWS)
    assert torch.emu.initial_seed() == 5


def test_an_explicit_generator_wins_and_leaves_the_device_generator_alone(d):
    torch.emu.manual_seed(1)
    expected_next = torch.rand(3, device=d).cpu()
    torch.emu.manual_seed(1)
    mine = torch.Generator(device=d).manual_seed(9)
    assert torch.equal(torch.rand(3, device=d, generator=mine).cpu(), torch.rand(3, generator=torch.Generator().manual_seed(9)))
    x = torch.empty(4, device=d).normal_(generator=torch.Generator().manual_seed(2))
    assert torch.equal(x.cpu(), torch.empty(4).normal_(generator=torch.Generator().manual_seed(2)))
    assert torch.equal(torch.rand(3, device=d).cpu(), expected_next)  # the device's stream did not move


def test_get_and_set_rng_state_restore_the_device_stream(d):
    torch.emu.manual_seed(3)
    saved = torch.emu.get_rng_state()
    assert saved.device.type == "cpu" and saved.dtype == torch.uint8
    first = _host(_draw_all(d))
    torch.emu.set_rng_state(saved)
    torch.rand(2)  # host draws do not matter either
    again = _host(_draw_all(d))
    assert all(torch.equal(first[name], again[name]) for name in DRAWS)
    torch.emu.set_rng_state_all(torch.emu.get_rng_state_all())
    with pytest.raises(RuntimeError, match="emu:7 does not exist"):
        torch.emu.get_rng_state(7)
    with pytest.raises(ValueError, match="cpu is not an emulated device"):
        torch.emu.get_rng_state("cpu")
    assert torch.equal(torch.emu.random.get_rng_state(d), torch.emu.get_rng_state(0))


def test_fork_rng_of_the_device_type_restores_the_device_stream(d):
    torch.emu.manual_seed(4)
    with torch.random.fork_rng(device_type="emu"):
        torch.rand(3, device=d)
    after_fork = torch.rand(3, device=d).cpu()
    torch.emu.manual_seed(4)
    assert torch.equal(torch.rand(3, device=d).cpu(), after_fork)


def test_default_generators_are_the_device_streams(d):
    generator = torch.emu.default_generators[0]
    assert generator.device == d
    generator.manual_seed(11)
    got = torch.randn(4, device=d).cpu()
    assert torch.equal(got, torch.randn(4, generator=torch.Generator().manual_seed(11)))
    torch.emu.seed()
    torch.emu.seed_all()
    assert torch.emu.initial_seed() == torch.emu.default_generators[0].initial_seed()


def test_dropout_in_a_training_model_drops_what_the_cpu_drops(d):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2))
    device_model = copy.deepcopy(model).to(d)
    x = torch.randn(4, 8)
    torch.manual_seed(1)
    expected = model(x)
    torch.manual_seed(1)
    torch.randn(100)  # host draws after seeding: the device's stream is its own
    got = device_model(x.to(d))
    torch.testing.assert_close(got.cpu(), expected)


def _random_block(t: torch.Tensor) -> torch.Tensor:
    noise = torch.randn_like(t) + torch.rand(t.shape, device=t.device) + torch.empty_like(t).uniform_()
    return F.dropout(t + noise, 0.4) * torch.empty_like(t).bernoulli_(0.6)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_random_ops_draw_from_the_device_generator(d, backend):
    # AOTAutograd flattens the device tensor into its host data, so the graph's random ops carry the
    # device's generator as an argument (else they would draw from the host's)
    torch._dynamo.reset()
    x = torch.arange(12.0).view(3, 4).to(d)
    compiled = torch.compile(_random_block, backend=backend)
    compiled(x)  # (compiles; the draws below are the calls' own)
    torch.emu.manual_seed(8)
    expected = _random_block(x).cpu()
    torch.emu.manual_seed(8)
    torch.rand(7)  # host draws in between
    assert torch.equal(compiled(x).cpu(), expected)


def test_two_devices_have_independent_generators(monkeypatch):
    monkeypatch.setenv("FL_DEVICE", "emu:cuda")
    monkeypatch.setenv("FL_EMU_DEVICES", "2")
    torch_fl.reset()
    d0, d1 = torch_fl.devices()  # (registers the second device)
    torch.emu.manual_seed_all(0)
    first = torch.rand(4, device=d0).cpu()
    assert torch.equal(torch.rand(4, device=d1).cpu(), first)  # same seed, own stream: the same draws
    torch.emu.manual_seed_all(0)
    torch.rand(50, device=d1)                                    # draws on emu:1 ...
    assert torch.equal(torch.rand(4, device=d0).cpu(), first)    # ... leave emu:0's stream where it was
    with torch.emu.device(1):
        torch.emu.manual_seed(3)                                 # the current device only
    assert torch.emu.default_generators[1].initial_seed() == 3
    assert torch.emu.default_generators[0].initial_seed() == 0
    torch.emu.set_rng_state(torch.emu.get_rng_state(0), 1)
    assert torch.equal(torch.rand(4, device=d1).cpu(), torch.rand(4, device=d0).cpu())
    x = torch.empty(6, device=d1).uniform_(generator=torch.emu.default_generators[0])
    assert x.device == d1


# Under the vendors' names, in processes of their own (the session's slot is named 'emu') ----------------
VENDOR = r'''
import json, torch, torch_fl
mod = getattr(torch, torch.fl.device().type)
d0, d1 = torch.device(torch.fl.device().type, 0), torch.device(torch.fl.device().type, 1)
out = {}
mod.manual_seed(0)
a = torch.rand(3, device=d0)
mod.manual_seed(0)
torch.rand(5)
out["host_draw_ignored"] = torch.equal(torch.rand(3, device=d0).cpu(), a.cpu())
out["equals_cpu"] = torch.equal(a.cpu(), torch.rand(3, generator=torch.Generator().manual_seed(0)))
mod.manual_seed_all(1)
torch.rand(10, device=d1)
out["independent"] = torch.equal(torch.rand(3, device=d0).cpu(), torch.rand(3, generator=torch.Generator().manual_seed(1)))
torch.manual_seed(2)
out["torch_manual_seed"] = torch.equal(torch.rand(3, device=d1).cpu(), torch.rand(3, generator=torch.Generator().manual_seed(2)))
state = mod.random.get_rng_state(d0)
b = torch.nn.functional.dropout(torch.ones(20, device=d0), 0.5)
mod.random.set_rng_state(state, d0)
out["state"] = torch.equal(torch.nn.functional.dropout(torch.ones(20, device=d0), 0.5).cpu(), b.cpu())
print(json.dumps(out))
'''


@pytest.mark.parametrize("chip", ["npu", "mlu", "musa"])
def test_vendor_seeding_calls_seed_the_device(chip):
    done = subprocess.run([sys.executable, "-c", VENDOR], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "FL_DEVICE": f"emu:{chip}", "FL_EMU_DEVICES": "2",
                               "OMP_NUM_THREADS": "1"}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"host_draw_ignored": True, "equals_cpu": True, "independent": True, "torch_manual_seed": True,
                   "state": True}
