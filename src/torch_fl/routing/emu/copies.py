"""Copies between host and emulated device (counted as transfers), dtype conversions, and syncs."""

from __future__ import annotations

from typing import Any

import torch

from ..._names import RouteKind
from ..table import Route, dtype_name
from .memory import _nbytes
from .slot import _no_device, backend_name, state
from .storage import host_tensor
from .tensor import SPECIAL, EmuTensor, _logical, _wrap

aten = torch.ops.aten


def _copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    rest = args[2:]
    if isinstance(dst, EmuTensor):
        if isinstance(src, EmuTensor):
            dst._data.copy_(src._data, *rest, **kwargs)
        elif _plain_device(src):
            dst._data.copy_(host_tensor(src), *rest, **kwargs)
        else:
            if src.device.type == "cpu" and src.dim() != 0:
                state.h2d_bytes += _nbytes(src)
                state.h2d_calls += 1
            dst._data.copy_(src, *rest, **kwargs)
        return dst
    if _plain_device(dst):
        # a plain device tensor PyTorch's C++ made over a device storage (legacy torch.load's
        # _set_from_file, storage.copy_ of such storages): its memory is host memory, written in place
        if isinstance(src, EmuTensor):
            host_tensor(dst).copy_(_logical(src), *rest, **kwargs)
        elif _plain_device(src):
            host_tensor(dst).copy_(host_tensor(src), *rest, **kwargs)
        else:
            state.h2d_bytes += _nbytes(src)
            state.h2d_calls += 1
            host_tensor(dst).copy_(src, *rest, **kwargs)
        return dst
    # a host (or other device) tensor receives device data (an EmuTensor's, or a plain device tensor's:
    # legacy torch.save and pickling a storage copy one to the host with at::from_blob(...).to(cpu))
    data = _logical(src) if isinstance(src, EmuTensor) else host_tensor(src)
    state.d2h_bytes += _nbytes(data)
    state.d2h_calls += 1
    dst.copy_(data, *rest, **kwargs)
    return dst


def _plain_device(tensor: torch.Tensor) -> bool:
    """A tensor on the emulated device that is no EmuTensor (made by PyTorch's C++ over a device storage)."""
    return not isinstance(tensor, EmuTensor) and tensor.device.type == backend_name()


def _to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    src = args[0]
    target = kwargs.get("device")
    cpu_kwargs = dict(kwargs)
    cpu_kwargs.pop("device", None)
    data = _logical(src) if isinstance(src, EmuTensor) else src
    if target is not None and target.type != backend_name():
        # device -> host (or another backend): a device-to-host copy, a sync
        state.d2h_bytes += _nbytes(data)
        state.d2h_calls += 1
        state.syncs += 1
        return func(data, **cpu_kwargs).to(target)
    index = target.index if target is not None and target.index is not None else \
        (src._index if isinstance(src, EmuTensor) else state.current)
    if index >= state.count:
        raise _no_device(index)
    if not isinstance(src, EmuTensor):
        state.h2d_bytes += _nbytes(data)
        state.h2d_calls += 1
    _check_dtype_conversion(func, args, kwargs, cpu_kwargs.get("dtype") or data.dtype)
    out = func(data, **cpu_kwargs)
    if out is data:
        out = out.clone()  # _to_copy always copies
    return _wrap(out, index)


def _check_dtype_conversion(func: Any, args: tuple, kwargs: dict, dtype: Any) -> None:
    if state.router is None or dtype_name(dtype) in state.dtypes:
        return
    raise state.router.error("aten::_to_copy.default", args, kwargs,
                             Route(RouteKind.UNSUPPORTED, "precision.dtypes"),
                             f"it produces {dtype_name(dtype)}, which is not in precision.dtypes")


def _item(func: Any, args: tuple, kwargs: dict) -> Any:
    state.syncs += 1
    return func(args[0]._data, *args[1:], **kwargs)



SPECIAL.update({
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _item,
})
