"""Model entry points: ``path/to/file.py:factory`` (or ``package.module:factory``).

The factory takes no arguments and returns ``(model, example_inputs)`` or
``(model, example_inputs, loss_fn)``:

- ``model``: a ``torch.nn.Module`` built on the CPU (analysis moves it where it needs it);
- ``example_inputs``: a tuple of positional arguments for ``model(*example_inputs)`` (a single tensor is
  accepted and wrapped);
- ``loss_fn(output, *example_inputs) -> scalar tensor`` (optional): used for backward passes and
  training steps; without it, training uses ``output.float().mean()`` (or the sum of the means of a
  tuple's floating-point tensors).

Example (``examples/gpt.py``)::

    def factory():
        model = GPT()
        tokens = torch.randint(0, 512, (8, 64))
        return model, (tokens,), lm_loss
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import ModelSpecError


@dataclass
class ModelSpec:
    name: str
    model: torch.nn.Module
    inputs: tuple
    loss_fn: Callable[..., torch.Tensor] | None

    def loss(self, output: Any, inputs: tuple | None = None) -> torch.Tensor:
        """The training loss of `output` (the factory's loss_fn, else a mean over the outputs)."""
        if self.loss_fn is not None:
            return self.loss_fn(output, *(self.inputs if inputs is None else inputs))
        return default_loss(output)


def default_loss(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    tensors = [t for t in (output.values() if isinstance(output, dict) else output)
               if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        raise ModelSpecError("the model output has no floating-point tensor to build a default loss from; "
                             "return a loss_fn from the factory")
    return sum(t.float().mean() for t in tensors)


# A model file is imported under this prefix + its stem (not its own name, which may clash with an
# installed module); compiler.aot knows the class recorded from it under that name.
FILE_MODULE_PREFIX = "_torch_fl_model_"


def _import(target: str) -> Any:
    path = Path(target)
    if target.endswith(".py") or path.exists():
        if not path.is_file():
            raise ModelSpecError(f"model file {target} does not exist")
        name = f"{FILE_MODULE_PREFIX}{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        # Let the model file import its siblings (examples/demo.py imports gpt.py).
        sys.path.insert(0, str(path.resolve().parent))
        try:
            sys.modules[name] = module
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.resolve().parent))
        return module
    try:
        return importlib.import_module(target)
    except ImportError as exc:
        raise ModelSpecError(f"cannot import {target}: {exc}") from None


def load_model(entry: str) -> ModelSpec:
    """Load ``file.py:factory`` / ``module:factory`` and check the factory contract."""
    target, sep, attr = entry.rpartition(":")
    if not sep or not target or not attr:
        raise ModelSpecError(f"'{entry}' is not a model entry point; write path/to/file.py:factory "
                             f"(for example examples/gpt.py:factory)")
    module = _import(target)
    factory = getattr(module, attr, None)
    if not callable(factory):
        from ..errors import did_you_mean

        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise ModelSpecError(f"{target} has no callable '{attr}'.{did_you_mean(attr, names)}")
    produced = factory()
    if not isinstance(produced, tuple) or len(produced) not in (2, 3):
        raise ModelSpecError(f"{entry} must return (model, example_inputs) or (model, example_inputs, "
                             f"loss_fn); it returned {type(produced).__name__}")
    model, inputs, *rest = produced
    if not isinstance(model, torch.nn.Module):
        raise ModelSpecError(f"{entry}: the first value must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ModelSpecError(f"{entry}: example_inputs must be a tuple of arguments, got {type(inputs).__name__}")
    loss_fn = rest[0] if rest else None
    if loss_fn is not None and not callable(loss_fn):
        raise ModelSpecError(f"{entry}: loss_fn must be callable")
    return ModelSpec(entry, model, tuple(inputs), loss_fn)
