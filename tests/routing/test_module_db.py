"""External truth for the emulated device: PyTorch's own ModuleInfo and OptimInfo databases.

Every float32 sample of ``common_modules.module_db`` runs forward and backward on emu:cuda and emu:mps
and on the plain CPU; outputs and parameter gradients must be equal (PyTorch's default float32
tolerances). Every ``common_optimizers.optim_db`` optimizer and configuration steps a small model on
both. At least 99% must agree; the rest are listed in KNOWN with the reason, and a sample that starts
to pass (or one that fails for another reason) fails the test until the list is updated.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_fl

pytest.importorskip("expecttest")  # torch.testing._internal needs it (dev extras)

# (chip, module) -> why its failing samples fail; the count of failing samples is checked too.
_ATTENTION = ("norm_first, no bias, masks: the CPU reference takes its fused flash-attention kernel and the "
              "emulated chip SDPA's math path (as a chip without that kernel); one gradient differs by "
              "1.8e-5 absolute (float32 summation order)")
_EMPTY_BATCH = ("an empty batch: PyTorch makes save_mean in toAccumulateType(float32, PrivateUse1) = float64 "
                "(float32 on a real mps device), and mps has no float64: the emulated backend's own error")
KNOWN: dict[tuple[str, str], tuple[int, str]] = {
    ("emu:cuda", "nn.TransformerDecoderLayer"): (1, _ATTENTION),
    ("emu:mps", "nn.TransformerDecoderLayer"): (1, _ATTENTION),
    ("emu:mps", "nn.BatchNorm1d"): (1, _EMPTY_BATCH),
    ("emu:mps", "nn.BatchNorm2d"): (1, _EMPTY_BATCH),
    ("emu:mps", "nn.BatchNorm3d"): (1, _EMPTY_BATCH),
}

MIN_SHARE = 0.99

# Optimizers not stepped here, and why.
NOT_RUN = {
    "SparseAdam": "takes sparse gradients only (nn.Embedding(sparse=True)), and the built-in cuda/mps "
                  "op tables list no sparse kernels: the emulated device stops with UnsupportedOperatorError "
                  "(test_emu_accelerator.py)",
}


def _to(value: Any, device: Any) -> Any:
    def move(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(device).requires_grad_(t.requires_grad)
    return tree_map(lambda v: move(v) if isinstance(v, torch.Tensor) else v, value)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _one_sample(info: Any, sample: Any, device: torch.device) -> None:
    """Forward and backward of one ModuleInfo sample on `device` and on the CPU; raises when they differ."""
    ctor_cpu = _to((sample.constructor_input.args, sample.constructor_input.kwargs), "cpu")
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    torch.manual_seed(0)
    cpu = info.module_cls(*ctor_cpu[0], **ctor_cpu[1])
    emu = copy.deepcopy(cpu)
    try:
        torch.manual_seed(1)
        expected = cpu(*_to(args, "cpu"), **_to(kwargs, "cpu"))
    except Exception:
        # a sample the CPU itself rejects (FractionalMaxPool's float64 samples with float32 input):
        # the device must reject it too
        with pytest.raises(Exception):  # noqa: B017
            _device_module(info, sample, emu, device)(*_to(args, device), **_to(kwargs, device))
        return
    emu = _device_module(info, sample, emu, device)
    torch.manual_seed(1)
    actual = emu(*_to(args, device), **_to(kwargs, device))
    torch.testing.assert_close(_to(_tensors(actual), "cpu"), _tensors(expected), equal_nan=True)
    outputs = [t for t in _tensors(expected) if t.requires_grad]
    if outputs:
        sum(t.float().sum() for t in outputs).backward()
        sum(t.float().sum() for t in _tensors(actual) if t.requires_grad).backward()
        torch.testing.assert_close(_to([p.grad for p in emu.parameters()], "cpu"),
                                   [p.grad for p in cpu.parameters()], equal_nan=True)


def _device_module(info: Any, sample: Any, copied: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    ctor = _to((sample.constructor_input.args, sample.constructor_input.kwargs), device)
    if _tensors(ctor):  # constructor tensors (FractionalMaxPool's samples): the device's own
        torch.manual_seed(0)
        copied = info.module_cls(*ctor[0], **ctor[1])
    return copied.to(device)


def run_module_db(device: torch.device) -> tuple[int, int, dict[str, list[str]]]:
    """(samples, passed, failures by module) of float32 module_db forward+backward on `device`."""
    from torch.testing._internal.common_modules import module_db

    total = passed = 0
    failures: dict[str, list[str]] = {}
    for info in module_db:
        # samples are made on the host (as the data of a real run is) and moved; made on the device,
        # several ModuleInfos mix in host tensors that no accelerator would accept
        samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                          training=True)
        for sample in samples:
            if sample.forward_input is None:
                continue
            total += 1
            try:
                _one_sample(info, sample, device)
                passed += 1
            except Exception as exc:
                failures.setdefault(info.name, []).append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    return total, passed, failures


def run_optim_db(device: torch.device) -> tuple[int, int, dict[str, list[str]]]:
    """(configurations, passed, failures) of optim_db: three steps of each optimizer configuration on a
    small model, on `device` and on the CPU, with the same gradients."""
    from torch.testing._internal.common_optimizers import optim_db

    total = passed = 0
    failures: dict[str, list[str]] = {}
    for info in optim_db:
        if info.optim_cls.__name__ in NOT_RUN:
            continue
        try:
            inputs = info.optim_inputs_func(device=str(device), dtype=torch.float32)
        except TypeError:
            inputs = info.optim_inputs_func(device=str(device))
        for optim_input in inputs:
            total += 1
            try:
                _optimizer_steps(info.optim_cls, optim_input.kwargs, device)
                passed += 1
            except Exception as exc:
                failures.setdefault(info.optim_cls.__name__, []).append(
                    f"{optim_input.desc}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return total, passed, failures


def _optimizer_steps(optim_cls: Any, kwargs: dict, device: torch.device) -> None:
    torch.manual_seed(0)
    # 2-D parameters only: Muon takes nothing else
    cpu = torch.nn.Sequential(torch.nn.Linear(6, 5, bias=False), torch.nn.Tanh(), torch.nn.Linear(5, 3, bias=False))
    emu = copy.deepcopy(cpu).to(device)
    kwargs_cpu = _to(kwargs, "cpu")
    kwargs_emu = _to(kwargs, device)
    results = []
    for model, options, where in ((cpu, kwargs_cpu, "cpu"), (emu, kwargs_emu, device)):
        opt = optim_cls(model.parameters(), **options)
        torch.manual_seed(2)
        for _ in range(3):
            x = torch.randn(4, 6).to(where)

            def closure(model: Any = model, x: Any = x, opt: Any = opt) -> torch.Tensor:
                opt.zero_grad()
                loss = model(x).pow(2).sum()
                loss.backward()
                return loss

            opt.step(closure)
        results.append([p.detach().cpu() for p in model.parameters()])
    torch.testing.assert_close(results[1], results[0])


def _check(chip: str, total: int, passed: int, failures: dict[str, list[str]], known: dict) -> None:
    unexplained = {name: reasons for name, reasons in failures.items() if (chip, name) not in known}
    assert not unexplained, f"{chip}: failures with no documented reason: {unexplained}"
    counts = {name: len(reasons) for name, reasons in failures.items()}
    for (known_chip, name), (count, _) in known.items():
        if known_chip == chip:
            assert counts.get(name, 0) == count, f"{chip}: {name} now fails {counts.get(name, 0)} samples " \
                                                  f"(KNOWN says {count}): update KNOWN"
    assert passed / total >= MIN_SHARE, f"{chip}: {passed}/{total}"


@pytest.fixture
def emulated(monkeypatch):
    def make(chip: str) -> torch.device:
        monkeypatch.setenv("FL_DEVICE", chip)
        torch_fl.reset()
        return torch_fl.device()
    return make


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["emu:cuda", "emu:mps"])
def test_module_db_forward_and_backward_equal_the_cpu(emulated, chip):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total, passed, failures = run_module_db(emulated(chip))
    print(f"{chip}: module_db float32 {passed}/{total} samples equal to the CPU",
          dict(Counter({k: len(v) for k, v in failures.items()})))
    _check(chip, total, passed, failures, KNOWN)


OPTIM_KNOWN: dict[tuple[str, str], tuple[int, str]] = {}


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["emu:cuda", "emu:mps"])
def test_optim_db_steps_equal_the_cpu(emulated, chip):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total, passed, failures = run_optim_db(emulated(chip))
    print(f"{chip}: optim_db {passed}/{total} configurations equal to the CPU", failures)
    _check(chip, total, passed, failures, OPTIM_KNOWN)
