"""``module.to(emulated)`` for modules whose parameters something else still holds.

An EmuTensor is a traceable wrapper subclass, so ``nn.Module._apply`` moves a parameter onto the device
by swapping the moved tensor into the existing Parameter object (``torch.utils.swap_tensors``): object
identity and tied weights survive, as ``param.data = ...`` keeps them on a real device. A swap refuses a
parameter that other references hold: a CPU forward whose autograd graph is still alive (``y = lstm(x)``
and then ``lstm.to(device)``: the graph saved the weights), a weak reference. On a real device the move
works all the same (PyTorch's ``set_data`` path), and here so it does: such a parameter is replaced, in
every module that holds it (so tied weights stay tied), by a fresh Parameter over the same data, which is
then swapped as usual; the old object stays on the host with the graph that holds it.

Nothing changes for a module no other reference holds, or for a conversion that stays on the host.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

_original_apply: Any = None
_local = threading.local()  # the move in progress: old parameter id -> (old, replacement, moved value)


def _busy(param: torch.Tensor) -> bool:
    """A parameter torch.utils.swap_tensors would refuse (another C++ reference, or a weak one)."""
    return param._use_count() > 1 or bool(weakref.getweakrefs(param))


def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> Any:
    moves = getattr(_local, "moves", None)
    if moves is None:  # the module the move started at: its submodules' _apply calls come back here
        _local.moves = {}
        try:
            return _apply(self, _replaying(fn, _local.moves), recurse)
        finally:
            _local.moves = None
    inner = fn.fn if isinstance(fn, _replaying) else fn
    # (each module's own parameters, checked when its _apply runs: nn.RNNBase drops its weak references
    # to them first)
    for key, param in list(self._parameters.items()):
        if param is None or is_traceable_wrapper_subclass(param):
            continue
        entry = moves.get(id(param))
        if entry is None and _busy(param):
            with torch.no_grad():
                moved = inner(param)
            replacement = None
            if is_traceable_wrapper_subclass(moved):  # onto the device: swap a fresh Parameter instead
                replacement = torch.nn.Parameter(param.detach(), requires_grad=param.requires_grad)
                if param.grad is not None:
                    replacement.grad = param.grad.detach()
            entry = moves[id(param)] = (param, replacement, moved)
        if entry is not None and entry[1] is not None:
            self._parameters[key] = entry[1]
    return _original_apply(self, fn, recurse)


class _replaying:
    """`fn` that returns the value computed for a replaced parameter (so `fn` runs once per tensor)."""

    def __init__(self, fn: Any, moves: dict) -> None:
        self.fn = fn
        self.moves = moves

    def __call__(self, tensor: torch.Tensor) -> Any:
        for old, replacement, moved in self.moves.values():
            if tensor is replacement or (replacement is None and tensor is old):
                if moved is not None:
                    self.moves[id(old)] = (old, replacement, None)
                    return moved
                break
        return self.fn(tensor)


def install() -> None:
    """Once per process (PyTorch's own _apply runs unchanged for every move that swaps cleanly)."""
    global _original_apply
    if _original_apply is None:
        _original_apply = torch.nn.Module._apply
        torch.nn.Module._apply = _apply  # type: ignore[method-assign]
