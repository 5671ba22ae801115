"""Numerical comparison of a model on a device against a reference, module by module.

Both runs start from the same weights and inputs (deep copies made before either run, cast to one
dtype). The reference runs with routing deactivated; the device run with routing active for the
device (an emulated chip ``emu:NAME`` runs on the CPU under its dispatch mode). Forward hooks copy each
module's output tensors to the CPU; the comparison happens after both runs, outside routing, so a
faulty routed kernel cannot corrupt the comparison itself.

The criterion is normwise, per tensor: ``max|a - b| <= atol + rtol * max|b|`` (``a`` the device's, ``b``
the reference's). Elementwise criteria (``torch.allclose``) fail correct low-precision kernels: a
different summation order moves every element by a few ulps *of the tensor's scale*, so small elements
near a cancellation get huge relative errors (measured on examples/gpt.py: emu:minimal vs cpu in float16
fails ``allclose`` with rtol 1e-2 in every module after the first attention, while the normwise error
stays below 1.6e-3).
See docs/analysis.md for the defaults and how they were chosen.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import CompareError
from ..report import Chart, Report, Section, Table
from .model import ModelSpec

ROOT = "<model>"
CRITERION = "max|device - reference| <= atol + rtol * max|reference| (per tensor)"

# Normwise (rtol, atol) per dtype. rtol is about 10x the largest normwise error measured between correct
# but different kernels (emu:minimal and translated CPU ops vs native CPU, forward and gradients of
# examples/gpt.py): float32 5e-7, float16 4e-3, bfloat16 3.4e-2; float32 keeps more headroom (kernels on
# real devices reduce in other orders and over longer axes) while still catching a 1e-3 relative fault.
# atol only matters for tensors that are (almost) all zero.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-5),
    "bfloat16": (8e-2, 1e-5),
}
DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    source: str = "default"

    def loosest(self, other: Tolerance | None) -> Tolerance:
        if other is None or (other.rtol <= self.rtol and other.atol <= self.atol):
            return self
        if self.rtol <= other.rtol and self.atol <= other.atol:
            return other
        return Tolerance(max(self.rtol, other.rtol), max(self.atol, other.atol),
                         f"{self.source} + {other.source}")


EXACT = Tolerance(0.0, 0.0, "exact (integer or bool)")


def dtype_tolerance(dtype: str, description: Any = None, rtol: float | None = None,
                    atol: float | None = None) -> Tolerance:
    """The tolerance for `dtype`: command line, else the description's precision.tolerances, else the
    built-in default; rtol and atol are resolved separately."""
    base_rtol, base_atol = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["float32"])
    source = "default"
    if description is not None:
        entry = description.section("precision").get("tolerances", {}).get(dtype)
        if entry:
            base_rtol, base_atol = entry.get("rtol", base_rtol), entry.get("atol", base_atol)
            source = f"description '{description.name}' precision.tolerances"
    if rtol is not None or atol is not None:
        source = "command line" if rtol is not None and atol is not None else f"command line + {source}"
    return Tolerance(base_rtol if rtol is None else rtol, base_atol if atol is None else atol, source)


def op_tolerances(description: Any) -> dict[str, Tolerance]:
    if description is None:
        return {}
    table = description.section("precision").get("op_tolerances", {})
    default_r, default_a = DEFAULT_TOLERANCES["float32"]
    return {op: Tolerance(t.get("rtol", default_r), t.get("atol", default_a), f"op_tolerances {op}")
            for op, t in table.items()}


# Differences -----------------------------------------------------------------------------------------
@dataclass
class Diff:
    max_abs: float
    max_rel: float  # max_abs / max|reference|: the normwise relative error
    rtol: float
    atol: float
    ok: bool

    def row(self) -> dict[str, Any]:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "rtol": self.rtol, "atol": self.atol,
                "ok": self.ok}


def _as_real64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.to(torch.float64)


def tensor_error(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(max |actual - expected|, max |expected|); NaN where both are NaN and equal infinities count as
    equal, any other non-finite difference is infinite."""
    if actual.shape != expected.shape:
        return math.inf, 0.0
    a, b = _as_real64(actual), _as_real64(expected)
    if a.numel() == 0:
        return 0.0, 0.0
    same = (a == b) | (a.isnan() & b.isnan())
    delta = (a - b).abs().masked_fill(same, 0.0).nan_to_num(nan=math.inf)
    finite = b[b.isfinite()]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return float(delta.max()), scale


def compare_tensors(actual: list[torch.Tensor], expected: list[torch.Tensor], tol: Tolerance) -> Diff:
    """Worst tensor of a module's outputs; integer and bool tensors must match exactly."""
    if len(actual) != len(expected):
        return Diff(math.inf, math.inf, tol.rtol, tol.atol, False)
    max_abs = max_rel = 0.0
    ok = True
    for a, b in zip(actual, expected, strict=True):
        exact = not (b.is_floating_point() or b.is_complex())
        t = EXACT if exact else tol
        err, scale = tensor_error(a, b)
        rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        ok = ok and a.dtype == b.dtype and err <= t.atol + t.rtol * scale
        max_abs, max_rel = max(max_abs, err), max(max_rel, rel)
    return Diff(max_abs, max_rel, tol.rtol, tol.atol, ok)


# Recording -------------------------------------------------------------------------------------------
def _no_modes() -> contextlib.AbstractContextManager:
    """Hooks copy tensors outside any dispatch mode (emulation, the tolerance recorder)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().to("cpu", copy=True) for t in tensors]


class ToleranceRecorder:
    """Data-flow of op tolerances during the reference run: every op's outputs carry the loosest
    tolerance of its own op_tolerances entry and of its tensor inputs', so a module's output (or a
    gradient) is allowed the error of every listed op it depends on, and nothing else is."""

    def __init__(self, by_op: dict[str, Tolerance]):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.weak import WeakTensorKeyDictionary

        from .._opnames import canonical_op_name

        self.by_op = by_op
        self.taint = WeakTensorKeyDictionary()
        self._names: dict[Any, Tolerance | None] = {}
        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if func not in recorder._names:
                    name = canonical_op_name(func)
                    recorder._names[func] = by_op.get(name) or by_op.get(name.rsplit(".", 1)[0])
                tol = recorder._names[func]
                for t in _tensors((args, kwargs)):
                    tol = recorder.taint.get(t, tol) if tol is None else tol.loosest(recorder.taint.get(t))
                if tol is not None:
                    for t in _tensors(out):
                        recorder.taint[t] = tol.loosest(recorder.taint.get(t))
                return out

        self.mode = _Mode

    def of(self, tensors: list[torch.Tensor]) -> Tolerance | None:
        found = None
        for t in tensors:
            tol = self.taint.get(t)
            if tol is not None:
                found = tol.loosest(found)
        return found


@dataclass
class Run:
    modules: list[tuple[str, list[torch.Tensor], Tolerance | None]] = field(default_factory=list)
    output: list[torch.Tensor] = field(default_factory=list)
    output_tol: Tolerance | None = None
    loss: float | None = None
    grads: dict[str, tuple[torch.Tensor | None, Tolerance | None]] = field(default_factory=dict)


def _module_hooks(model: torch.nn.Module, run: Run, recorder: ToleranceRecorder | None) -> list[Any]:
    calls: Counter[str] = Counter()

    def hook(name: str) -> Callable:
        def record(_module: torch.nn.Module, _args: Any, output: Any) -> None:
            tensors = _tensors(output)
            if not tensors:
                return
            calls[name] += 1
            key = name if calls[name] == 1 else f"{name}#{calls[name]}"
            with _no_modes():
                run.modules.append((key, _to_host(tensors), recorder.of(tensors) if recorder else None))
        return record

    return [m.register_forward_hook(hook(name or ROOT)) for name, m in model.named_modules()]


def execute(spec: ModelSpec, model: torch.nn.Module, inputs: tuple, *, train: bool, seed: int,
            context: contextlib.AbstractContextManager, recorder: ToleranceRecorder | None = None) -> Run:
    """One forward (and with `train` a backward) pass under `context`, recording module outputs."""
    run = Run()
    handles = _module_hooks(model, run, recorder)
    model.train(train)
    torch.manual_seed(seed)  # dropout and other random ops draw the same numbers on both sides
    try:
        with context, (recorder.mode() if recorder else contextlib.nullcontext()), \
                torch.set_grad_enabled(train):
            output = model(*inputs)
            if train:
                loss = spec.loss(output, inputs)
                loss.backward()
        with _no_modes():
            tensors = _tensors(output)
            run.output = _to_host(tensors)
            run.output_tol = recorder.of(tensors) if recorder else None
            if train:
                run.loss = float(loss.detach().cpu())
                for name, p in model.named_parameters():
                    grad = p.grad
                    run.grads[name] = (None if grad is None else grad.detach().to("cpu", copy=True),
                                       recorder.of([grad]) if recorder and grad is not None else None)
    finally:
        for h in handles:
            h.remove()
    return run


# The comparison ----------------------------------------------------------------------------------------
def _description_of(device: str) -> Any:
    from ..device import governing

    return governing(device)


def _prepare(spec: ModelSpec, dtype: torch.dtype) -> tuple[torch.nn.Module, tuple]:
    model = copy.deepcopy(spec.model).to(dtype)
    inputs = tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point()
                      else t, copy.deepcopy(spec.inputs))
    return model, inputs


def _move(model: torch.nn.Module, inputs: tuple, device: torch.device) -> tuple[torch.nn.Module, tuple]:
    return model.to(device), tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def compare(spec: ModelSpec, device: str, reference: str = "cpu", *, dtype: str = "float32",
            train: bool = False, rtol: float | None = None, atol: float | None = None,
            seed: int = 0) -> Report:
    """Run `spec` on `reference` (routing off) and `device` (routing on) and compare module by module."""
    from ..routing import activated, deactivate
    from ..routing.current import use_device

    torch_dtype = getattr(torch, dtype)
    description = _description_of(device)
    dev, ref_dev = use_device(device), use_device(reference)
    deactivate()  # torch.fl.device()'s first use may have activated routing: the reference runs without

    base = dtype_tolerance(dtype, description, rtol, atol)
    by_op = op_tolerances(description)
    recorder = ToleranceRecorder(by_op) if by_op else None

    # Both copies before either run: a run must not see weights the other changed.
    ref_model, ref_inputs = _move(*_prepare(spec, torch_dtype), ref_dev)
    dev_model, dev_inputs = _move(*_prepare(spec, torch_dtype), dev)
    ref = execute(spec, ref_model, ref_inputs, train=train, seed=seed, context=contextlib.nullcontext(),
                  recorder=recorder)
    got = execute(spec, dev_model, dev_inputs, train=train, seed=seed, context=activated(device))
    return build_report(spec, device, reference, dtype, train, base, by_op, ref, got)


def build_report(spec: ModelSpec, device: str, reference: str, dtype: str, train: bool, base: Tolerance,
                 by_op: dict[str, Tolerance], ref: Run, got: Run) -> Report:
    if [k for k, _, _ in ref.modules] != [k for k, _, _ in got.modules]:
        raise CompareError(
            f"the model called different modules on {device} than on {reference} (a data-dependent "
            f"branch?): {len(got.modules)} module calls vs {len(ref.modules)}; cannot compare per module")
    modules = []
    for (name, expected, tol), (_, actual, _) in zip(ref.modules, got.modules, strict=True):
        modules.append({"module": name, **compare_tensors(actual, expected, base.loosest(tol)).row()})
    first = next((m["module"] for m in modules if not m["ok"]), None)
    output = compare_tensors(got.output, ref.output, base.loosest(ref.output_tol)).row()
    gradients = []
    if train:
        output["loss"] = {"reference": ref.loss, "device": got.loss,
                          "abs_diff": abs((got.loss or 0.0) - (ref.loss or 0.0))}
        for name, (expected, tol) in ref.grads.items():
            actual = got.grads.get(name, (None, None))[0]
            if expected is None and actual is None:
                continue
            if expected is None or actual is None:
                row = Diff(math.inf, math.inf, base.rtol, base.atol, False).row()
            else:
                row = compare_tensors([actual], [expected], base.loosest(tol)).row()
            gradients.append({"parameter": name, **row})
    ok = all(m["ok"] for m in modules) and output["ok"] and all(g["ok"] for g in gradients)
    data: dict[str, Any] = {
        "model": spec.name, "device": device, "reference": reference, "dtype": dtype, "train": train,
        "tolerance": {"rtol": base.rtol, "atol": base.atol, "source": base.source, "criterion": CRITERION,
                      "op_tolerances": {op: {"rtol": t.rtol, "atol": t.atol} for op, t in by_op.items()}},
        "modules": modules, "first_failure": first, "output": output,
    }
    if train:
        data["gradients"] = gradients
    data["ok"] = ok
    return _render(data)


# Report ----------------------------------------------------------------------------------------------
def _row(entry: dict[str, Any], key: str) -> list[Any]:
    return [entry[key], entry["max_abs"], entry["max_rel"], entry["rtol"], entry["atol"],
            "ok" if entry["ok"] else "FAIL"]


def _render(data: dict[str, Any]) -> Report:
    modules, output = data["modules"], data["output"]
    failing = [m for m in modules if not m["ok"]]
    tol = data["tolerance"]
    summary = [
        ("model", data["model"]),
        ("device", f"{data['device']} (routing on) vs reference {data['reference']} (routing off)"),
        ("dtype", data["dtype"] + (", forward + backward" if data["train"] else ", forward")),
        ("tolerance", f"rtol {tol['rtol']:g}, atol {tol['atol']:g} ({tol['source']})"
                      + (f"; {len(tol['op_tolerances'])} op tolerances" if tol["op_tolerances"] else "")),
        ("modules", f"{len(modules)} compared, {len(failing)} outside tolerance"),
        ("first failure", data["first_failure"] or "none"),
        ("output", f"max abs {output['max_abs']:.3g}, max rel {output['max_rel']:.3g}: "
                   + ("ok" if output["ok"] else "OUTSIDE TOLERANCE")),
    ]
    if data["train"]:
        grads = data["gradients"]
        bad = [g for g in grads if not g["ok"]]
        summary.append(("gradients", f"{len(grads)} compared, {len(bad)} outside tolerance"))
    summary.append(("verdict", "within tolerance" if data["ok"] else "OUTSIDE TOLERANCE"))

    columns = ["module", "max abs", "max rel", "rtol", "atol", "ok"]
    module_section = Section(
        "Modules (execution order)",
        text=[f"Criterion: {CRITERION}. A module's rtol/atol are the loosest of the dtype's and of the "
              "op_tolerances of every op its output depends on."],
        tables=[Table(columns, [_row(m, "module") for m in modules])],
        charts=[Chart("line", "Max relative error per module", [m["module"] for m in modules],
                      [{"name": "max relative error", "values": [m["max_rel"] for m in modules]},
                       {"name": "rtol", "values": [m["rtol"] for m in modules]}],
                      x_label="module (execution order)", y_label="max|d - r| / max|r|", log_y=True)])
    sections = [module_section]
    out_rows = [["output", output["max_abs"], output["max_rel"], output["rtol"], output["atol"],
                 "ok" if output["ok"] else "FAIL"]]
    out_text = []
    if data["train"]:
        loss = output["loss"]
        out_text.append(f"loss: reference {loss['reference']:.6g}, device {loss['device']:.6g}, "
                        f"difference {loss['abs_diff']:.3g}")
    sections.append(Section("Final output", text=out_text, tables=[Table(columns, out_rows)]))
    if data["train"]:
        sections.append(Section("Gradients", tables=[
            Table(["parameter", *columns[1:]], [_row(g, "parameter") for g in data["gradients"]])]))
    warnings = []
    if data["first_failure"]:
        warnings.append(f"{data['first_failure']} is the first module outside tolerance; ops the parent "
                        "module calls itself (outside submodules) show up in the next module that uses "
                        "their result")
    return Report(f"torchfl compare: {data['model']}", data, summary, sections, warnings)

