"""Lazy modules on the emulated device (``nn.LazyLinear(8).to(d)``).

An uninitialized parameter moved to a device stays uninitialized there (PyTorch's mixin keeps its
class through ``.to()``), and its first forward materializes it on that device. A device tensor of the
emulator is an EmuTensor, so the moved placeholder becomes an EmuTensor that is also uninitialized:
`EmuUninitializedParameter` / `EmuUninitializedBuffer`, which materialize into a plain EmuTensor
(``param.data = torch.empty(shape, device=d)``, then the class becomes EmuTensor, a Parameter still).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from .tensor import EmuTensor

# module.to() wraps a moved wrapper-subclass tensor in nn.Parameter (detach, requires_grad_) before it
# swaps it in: those two are allowed on the placeholder too.
_ALLOWED = [*UninitializedTensorMixin._allowed_methods, torch.Tensor.detach, torch.Tensor.requires_grad_]


class EmuUninitializedParameter(UninitializedParameter, EmuTensor):
    cls_to_become = EmuTensor
    _allowed_methods = _ALLOWED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # (nn.Parameter(placeholder, requires_grad=...) returns the placeholder itself)


class EmuUninitializedBuffer(UninitializedBuffer, EmuTensor):
    cls_to_become = EmuTensor
    _allowed_methods = _ALLOWED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # (nn.Parameter(placeholder, requires_grad=...) returns the placeholder itself)




_original: Any = None


def _torch_function(cls: type, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
    lazy = issubclass(cls, (UninitializedParameter, UninitializedBuffer))
    if lazy and issubclass(cls, UninitializedBuffer) and _allowed(cls, func):
        # PyTorch would turn the result into the buffer's class with as_subclass, which an EmuTensor
        # (a Python object already) cannot become; run the call plainly and convert below
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if type(out) is not EmuTensor:
            return torch._tensor._convert(out, cls)
    else:
        out = _original.__func__(cls, func, types, args, kwargs)
    if lazy and type(out) is EmuTensor:
        # (assigning the class keeps the object: PyTorch already holds it as the result)
        is_param = issubclass(cls, UninitializedParameter)
        out.__class__ = EmuUninitializedParameter if is_param else EmuUninitializedBuffer
        if is_param:
            out._is_param = True
    return out


def _allowed(cls: Any, func: Any) -> bool:
    return func in cls._allowed_methods or func.__class__.__name__ == "method-wrapper"


def register() -> None:
    """Let uninitialized parameters and buffers stay uninitialized when moved to the emulated device."""
    global _original
    if _original is None:
        _original = UninitializedTensorMixin.__dict__["__torch_function__"]
        UninitializedTensorMixin.__torch_function__ = classmethod(_torch_function)  # type: ignore[assignment]
