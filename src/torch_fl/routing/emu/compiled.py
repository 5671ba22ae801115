"""torch.compile on an emulated device: Inductor stops with a torch-fl error.

Dynamo and AOTAutograd trace through ``EmuTensor.__torch_dispatch__`` (the chip's routes and dtypes are
checked while tracing, and the graph they leave computes with the held CPU data). Inductor would then
generate *host* code for that graph (C++/OpenMP for the CPU), not what the chip's compiler makes (Triton
for CUDA, the vendor's own elsewhere): a silent host compile. It is refused, with the backends that do
emulate the chip named (``eager``, ``aot_eager``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..._imports import after_import
from ...errors import RuntimeUnsupportedError
from .slot import backend_name, state

_installed = False
COMPILE_FX = "torch._inductor.compile_fx"  # every Inductor entry calls its compile_fx at call time


def register() -> None:
    """Guard Inductor (``torch.compile(m)``, ``backend="inductor"``, every mode, and the paths around
    torch.compile: ``torch._dynamo.optimize("inductor")``, ``backend=compile_fx``): a graph with a tensor
    on the emulated device is refused before Inductor compiles it. The guard wraps
    ``torch._inductor.compile_fx.compile_fx``, which each of them looks up when it compiles; that module
    is patched when it is first imported (torch-fl's import hook: Inductor is heavy, and importing it here
    would make every ``import torch_fl`` pay for it)."""
    global _installed
    if _installed:
        return
    _installed = True
    after_import(COMPILE_FX, _guard)


def _guard(module: Any) -> None:
    original = module.compile_fx
    if getattr(original, "_torch_fl_guard", False):
        return

    @functools.wraps(original)
    def compile_fx(model_: Any, example_inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        where = on_device(model_, example_inputs_)
        if where is not None:
            raise RuntimeUnsupportedError(inductor_refusal(where))
        return original(model_, example_inputs_, *args, **kwargs)

    compile_fx._torch_fl_guard = True  # type: ignore[attr-defined]
    module.compile_fx = compile_fx


def inductor_refusal(where: torch.device) -> str:
    chip = getattr(state.description, "name", "") or backend_name()
    return (f"torch-fl: Inductor cannot compile for the emulated device {where} (chip '{chip}'): it would "
            f"generate host (CPU) code, not the chip's, so the compiled model would not be checked against "
            f"the chip. Use torch.compile(model, backend=\"aot_eager\") (or \"eager\") on an emulated device: "
            f"they trace through the emulated device and check the chip's routes and dtypes; compile with "
            f"Inductor on the real chip.")


def on_device(model: Any, inputs: Any) -> torch.device | None:
    """The emulated device a graph's inputs or intermediate values are on, else None."""
    name = backend_name()
    for value in inputs or ():
        if isinstance(value, torch.Tensor) and value.device.type == name:
            return value.device
    graph = getattr(model, "graph", None)
    for node in getattr(graph, "nodes", ()):
        value = node.meta.get("example_value", node.meta.get("val"))
        for one in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(one, torch.Tensor) and one.device.type == name:
                return one.device
    return None
