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

``x.data = x.data.to(device)`` of a host tensor or Parameter (PyTorch's ``set_data`` refuses a wrapper
subclass) is answered here too, by the same swap (``set_data`` below).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .slot import state

_original_apply: Any = None
_local = threading.local()  # the move in progress: old parameter id -> (old, replacement, moved value)


def _busy(param: torch.Tensor) -> bool:
    """A parameter torch.utils.swap_tensors would refuse: another C++ reference than an existing
    AccumulateGrad node (which a swap poisons, as PyTorch does), or a weak reference."""
    if weakref.getweakrefs(param):
        return True
    count = param._use_count()
    if count <= 1:
        return False
    if count > 2 or not param.is_leaf:
        return True
    node = torch.autograd.graph.get_gradient_edge(param).node  # (made here if none existed: then busy)
    busy = param._use_count() != 2
    del node
    return busy


def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> Any:
    moves = getattr(_local, "moves", None)
    if moves is None:  # the module the move started at: its submodules' _apply calls come back here
        _local.moves = {}
        try:
            return _apply(self, _replaying(fn, _local.moves), recurse)
        finally:
            _local.moves = None
    inner = fn.fn if isinstance(fn, _replaying) else fn
    # Parameters on the device move by swapping too, off the device included (PyTorch would give each
    # module a new Parameter, untying tied weights; a real device keeps them, by param.data = ...)
    on_device = any(p is not None and is_traceable_wrapper_subclass(p) for p in self._parameters.values())
    # (each module's own parameters, checked when its _apply runs: nn.RNNBase drops its weak references
    # to them first)
    for key, param in list(self._parameters.items()):
        if param is None:
            continue
        entry = moves.get(id(param))
        if entry is None and _busy(param):
            with torch.no_grad():
                moved = inner(param)
            replacement = None
            if on_device or is_traceable_wrapper_subclass(moved):  # a swap: of a fresh Parameter instead
                replacement = torch.nn.Parameter(param.detach(), requires_grad=param.requires_grad)
                if param.grad is not None:
                    replacement.grad = param.grad.detach()
            entry = moves[id(param)] = (param, replacement, moved)
        if entry is not None and entry[1] is not None:
            self._parameters[key] = entry[1]
    if not on_device or torch.__future__.get_swap_module_params_on_conversion():
        return _original_apply(self, fn, recurse)
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        return _original_apply(self, fn, recurse)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


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


# ``x.data = x.data.to(device)`` ---------------------------------------------------------------------------
# PyTorch's ``.data`` setter (``variable.set_data``) moves a tensor between two devices in place when both
# TensorImpls are plain dense ones (CPU <-> CUDA, CPU <-> npu on torch_npu). A host tensor and an EmuTensor
# are not (the latter is a Python wrapper subclass), and PyTorch refuses ("incompatible tensor type"). No
# kernel or dispatch rule sees that call, so the setter itself is answered: for a host tensor given device
# data (the one case PyTorch refuses that a real device allows), the tensor object takes the device data by
# torch.utils.swap_tensors, keeping its identity, requires_grad, Parameter-ness and attributes, as set_data
# keeps them. Every other assignment is PyTorch's own setter.
_TENSOR_DATA = torch._C.TensorBase.data


def _get_data(self: torch.Tensor) -> torch.Tensor:
    return _TENSOR_DATA.__get__(self)


def _set_data(self: torch.Tensor, value: torch.Tensor) -> None:
    # (only device data given to a host tensor or Parameter: other subclasses keep PyTorch's answer)
    if type(self) in (torch.Tensor, torch.nn.Parameter) and state.tensor_type is not None and \
            isinstance(value, state.tensor_type):
        set_data(self, value)
    else:
        _TENSOR_DATA.__set__(self, value)


def set_data(self: torch.Tensor, value: torch.Tensor) -> None:
    """``self.data = value`` across tensor types (host tensor <- device data): `self` keeps its identity,
    requires_grad, Parameter-ness, attributes and gradient, and shares `value`'s data."""
    with torch.no_grad():
        replacement = value.detach()
    if isinstance(self, torch.nn.Parameter):
        replacement = torch.nn.Parameter(replacement, requires_grad=self.requires_grad)
    else:
        replacement.requires_grad_(self.requires_grad)
    grad = self.grad
    attributes = dict(self.__dict__)
    try:
        torch.utils.swap_tensors(self, replacement)
    except RuntimeError as exc:
        raise RuntimeError(
            f"tensor.data = <{value.device} tensor>: the tensor on {replacement.device} could not take the "
            f"device data in place ({exc}). On the emulated device a host tensor becomes a device tensor by "
            f"swapping, which PyTorch refuses while an autograd graph or a weak reference holds the tensor. "
            f"Fix: move it before the forward pass, or make a new tensor: x = x.to('{value.device}')") from exc
    for key, item in attributes.items():
        self.__dict__.setdefault(key, item)
    if grad is not None:
        # set_data leaves the gradient where it was; PyTorch's Python grad setter refuses one on another
        # device than its tensor, so it moves along (code that moves .grad.data next then finds it there)
        self.grad = grad.to(value.device) if grad.device != value.device else grad


def install() -> None:
    """Once per process (PyTorch's own _apply runs unchanged for every move that swaps cleanly)."""
    global _original_apply
    if _original_apply is None:
        _original_apply = torch.nn.Module._apply
        torch.nn.Module._apply = _apply  # type: ignore[method-assign]
        # (torch.Tensor, not TensorBase: EmuTensor defines its own .data, and C++ code never reads this)
        torch.Tensor.data = property(_get_data, _set_data, doc=_TENSOR_DATA.__doc__)  # type: ignore[method-assign,assignment]
