"""One harness for PyTorch's ModuleInfo database on an emulated chip, used by tests/routing/test_module_db.py
(in-process, emu:cuda and emu:mps) and by scripts/moduledb_emu.py (any chip, in child processes when asked:
a renamed chip such as npu needs a fresh process).

Every ModuleInfo of ``torch.testing._internal.common_modules.module_db`` that supports float32 gives its
samples (training mode, requires_grad inputs), made on the host as a real run's data is. Each is built once
on the CPU (seeded), copied to the device (constructor tensors made on the device: FractionalMaxPool's),
and run forward and backward (the sum of its floating outputs) on both. `check_sample` says:

- ``pass``: outputs, parameter gradients and input gradients match (assert_close's float32 tolerances,
  loosened by the ModuleInfo's own float32 CPU tolerance overrides);
- ``unsupported``: the emulated run stops with torch-fl's UnsupportedOperatorError (the chip cannot run it,
  and says so);
- ``skip``: the CPU reference raises and the device raises too (nothing to compare; both reject it);
- ``fail``: anything else: a mismatch, another exception, or a device that accepts what the CPU rejects.

KNOWN is the documented remainder: the samples that fail, per chip and module, with why.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torch_fl.errors import UnsupportedOperatorError

RESULTS = ("pass", "unsupported", "skip", "fail")

# (chip, module) -> (failing samples, why); a count that changes fails tests/routing/test_module_db.py.
# (Before the fold, the in-process test seeded every sample alike (construct 0, forward 1) and one
# nn.TransformerDecoderLayer sample (norm_first, no bias, masks) differed by 1.8e-5 in one gradient: the CPU
# takes its fused flash-attention kernel, the emulated chip SDPA's math path. Under the per-sample seed
# used here it is within float32 tolerance on every chip.)
_EMPTY_BATCH = ("an empty batch: PyTorch makes save_mean in toAccumulateType(float32, PrivateUse1) = float64 "
                "(float32 on a real mps device), and mps has no float64: the emulated backend's own error")
KNOWN: dict[tuple[str, str], tuple[int, str]] = {
    ("emu:mps", "nn.BatchNorm1d"): (1, _EMPTY_BATCH),
    ("emu:mps", "nn.BatchNorm2d"): (1, _EMPTY_BATCH),
    ("emu:mps", "nn.BatchNorm3d"): (1, _EMPTY_BATCH),
}


def _to(value: Any, device: Any, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """`value` with its tensors copied to `device`; one tensor passed twice stays one tensor (samples such
    as KLDivLoss's pass the same tensor as input and target, and its gradient is the sum)."""
    memo = {} if memo is None else memo

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in memo:
            moved = t.detach().to(device)
            memo[id(t)] = moved.requires_grad_(t.requires_grad) if t.is_floating_point() else moved
        return memo[id(t)]
    return pytree.tree_map(move, value)


def _floats(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _run(module: torch.nn.Module, args: Any, kwargs: Any, seed: int) -> tuple[list, list, list]:
    """(outputs, parameter gradients, input gradients) of one forward and backward."""
    torch.manual_seed(seed)
    out = module(*args, **kwargs)
    outs = _floats(out)
    leaves = [t for t in _floats((args, kwargs)) if t.requires_grad]
    params = [p for p in module.parameters() if p.requires_grad]
    grads: list = []
    differentiable = [o for o in outs if o.requires_grad]
    if differentiable:
        loss = sum(o.sum() for o in differentiable)
        grads = list(torch.autograd.grad(loss, params + leaves, allow_unused=True))
    return [o.detach() for o in outs], grads[:len(params)], grads[len(params):]


def _tolerance(info: Any) -> dict[str, float]:
    """The ModuleInfo's own float32 CPU tolerance override, if any (else assert_close's defaults)."""
    for decorator in getattr(info, "decorators", ()) or ():
        override = getattr(decorator, "cls", None)
        tol = getattr(override, "d", None) if override is not None else getattr(decorator, "d", None)
        if isinstance(tol, dict) and torch.float32 in tol:
            t = tol[torch.float32]
            return {"rtol": max(t.rtol, 1.3e-6), "atol": max(t.atol, 1e-5)}
    return {"rtol": 1.3e-6, "atol": 1e-5}


def _close(expected: list, actual: list, tol: dict[str, float], what: str) -> None:
    if len(expected) != len(actual):
        raise AssertionError(f"{what}: {len(expected)} tensors on the CPU, {len(actual)} on the chip")
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        if e is None or a is None:
            if (e is None) != (a is None):
                raise AssertionError(f"{what}[{i}]: None on one side only")
            continue
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol, msg=lambda m, i=i: f"{what}[{i}]: {m}")


def _device_module(info: Any, sample: Any, reference: torch.nn.Module, device: torch.device,
                   seed: int) -> torch.nn.Module:
    ctor = _to((sample.constructor_input.args, sample.constructor_input.kwargs), device)
    if any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(ctor)):
        torch.manual_seed(seed)  # constructor tensors (FractionalMaxPool's): the device's own
        return info.module_cls(*ctor[0], **ctor[1]).to(device)  # (a `device="cpu"` among them)
    return copy.deepcopy(reference).to(device)


def check_sample(info: Any, sample: Any, device: torch.device, seed: int) -> tuple[str, str]:
    """(one of RESULTS, detail) of one sample on `device` against the CPU."""
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    torch.manual_seed(seed)
    reference = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    emulated = copy.deepcopy(reference)
    try:
        expected = _run(reference, args, kwargs, seed)
    except Exception as exc:  # the CPU rejects it: the device must reject it too
        cpu_error = f"CPU reference raised {type(exc).__name__}: {str(exc)[:120]}"
        try:
            memo: dict[int, torch.Tensor] = {}
            _run(_device_module(info, sample, emulated, device, seed), _to(args, device, memo),
                 _to(kwargs, device, memo), seed)
        except Exception:
            return "skip", cpu_error
        return "fail", f"the device accepts what the CPU rejects ({cpu_error})"
    try:
        memo = {}
        actual = _run(_device_module(info, sample, emulated, device, seed), _to(args, device, memo),
                      _to(kwargs, device, memo), seed)
    except UnsupportedOperatorError as exc:
        return "unsupported", str(exc).splitlines()[0][:200]
    except Exception as exc:
        return "fail", f"{type(exc).__name__}: {str(exc)[:300]}"
    tol = _tolerance(info)
    try:
        for name, e, a in zip(("outputs", "parameter grads", "input grads"), expected, actual, strict=True):
            _close(e, a, tol, name)
    except AssertionError as exc:
        return "fail", str(exc)[:300]
    return "pass", ""


def samples(start: int = 0, modules: set[str] | None = None, per_module: int = 0) -> Iterator[tuple]:
    """(position, info, sample index, sample or the exception that made the samples) of module_db's float32
    samples, from position `start`, of `modules` only when given, `per_module` each when > 0."""
    from torch.testing._internal.common_modules import module_db

    for position, info in enumerate(module_db):
        if position < start or (modules and info.name not in modules) or torch.float32 not in info.dtypes:
            continue
        try:
            made = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                           training=True)
        except Exception as exc:
            yield position, info, -1, exc
            continue
        made = [s for s in made if s.forward_input is not None]
        for index, sample in enumerate(made[:per_module or None]):
            yield position, info, index, sample


def check(chip: str, failures: dict[str, list[str]]) -> list[str]:
    """What disagrees with KNOWN for `chip`: failures with no documented reason, counts that changed."""
    problems = [f"{chip}: {name} fails with no documented reason: {reasons}"
                for name, reasons in failures.items() if (chip, name) not in KNOWN]
    counts = Counter({name: len(reasons) for name, reasons in failures.items()})
    problems += [f"{chip}: {name} now fails {counts[name]} samples (KNOWN says {count}): update KNOWN"
                 for (known_chip, name), (count, _) in KNOWN.items() if known_chip == chip and counts[name] != count]
    return problems


# optim_db --------------------------------------------------------------------------------------------
# Optimizers not stepped (tests/routing/test_module_db.py, moduledb_emu.py --optim), and why.
NOT_RUN = {
    "SparseAdam": "takes sparse gradients only (nn.Embedding(sparse=True)), and the built-in cuda/mps "
                  "op tables list no sparse kernels: the emulated device stops with UnsupportedOperatorError "
                  "(test_emu_accelerator.py)",
}


def _detached_to(value: Any, device: Any) -> Any:
    def move(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(device).requires_grad_(t.requires_grad)
    return pytree.tree_map(lambda v: move(v) if isinstance(v, torch.Tensor) else v, value)


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
    kwargs_cpu = _detached_to(kwargs, "cpu")
    kwargs_emu = _detached_to(kwargs, device)
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
