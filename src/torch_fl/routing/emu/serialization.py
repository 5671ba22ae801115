"""``torch.save`` / ``torch.load`` (every map_location form) and storage calls (``set_``) on the
emulated device; the device storages themselves are in storage.py."""

from __future__ import annotations

from typing import Any

import torch

from .slot import _no_device, backend_name, device, state
from .storage import _device_of, device_storage, host_of, sync
from .tensor import SPECIAL, EmuTensor, _mismatch

aten = torch.ops.aten


def _register_serialization() -> None:
    """map_location="emu" for checkpoints saved from host tensors: PyTorch's PrivateUse1 deserializer
    would allocate an untyped storage on the device, which a Python backend has none of."""
    from torch import serialization

    def tag(obj: Any) -> str | None:
        return None

    def restore(obj: Any, location: str) -> Any:
        name = backend_name()
        if location == name or location.startswith(name + ":"):
            return _device_storage(obj, torch.device(location))
        return None

    serialization.register_package(19, tag, restore)
    _register_storage_kernels()


_libraries: list[Any] = []


def _register_storage_kernels() -> None:
    """``set_`` with a storage as PrivateUse1 kernels. ``torch.tensor(<device storage>)`` builds
    ``at::empty({0}, storage.device()).set_(storage)`` in C++ with the Python key excluded, so the call
    reaches PrivateUse1 itself rather than ``EmuTensor.__torch_dispatch__`` (PyTorch's Python fallback
    then stops in its ``func != nullptr`` internal assert); these kernels run the emulator's own ``set_``.
    Every other call of these ops on the device takes the Python key first and never reaches them."""
    library = torch.library.Library("aten", "IMPL")
    for op in (aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
               aten.set_.source_Tensor_storage_offset):
        library.impl(op.__name__, _kernel(op), "PrivateUse1")
    _libraries.append(library)


def _kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if not isinstance(args[0], EmuTensor):
            raise RuntimeError(f"{op}: a tensor on {args[0].device} that the emulator did not make cannot "
                               f"take a storage; make it with torch.empty(0, device='{args[0].device}')")
        return _set_storage(op, args, kwargs)
    return kernel


def _device_storage(host: Any, where: torch.device) -> Any:
    """A storage that says it is on `where` and points at `host`'s memory (kept alive as `_host`):
    torch._utils._rebuild_tensor then builds ``torch.empty(0, device=where).set_(storage, ...)``, which
    `_set_storage` turns into an EmuTensor over `host`."""
    host = getattr(host, "_untyped_storage", host)
    host = host_of(host) or host  # (already a device storage: the host storage it stands for)
    if where.index is None:
        where = device(state.current)
    if where.index >= state.count:
        raise _no_device(where.index)
    storage = device_storage(host, where)
    state.h2d_bytes += host.nbytes()
    state.h2d_calls += 1
    return storage


def _set_storage(func: Any, args: tuple, kwargs: dict) -> Any:
    """set_(tensor) and set_(storage, ...): the data takes the source's host data, and the wrapper its
    sizes, strides, offset and device storage (the source's own: the two share it, as on a device)."""
    self = args[0]
    source = args[1]
    if not isinstance(self, EmuTensor):  # host.set_(device tensor): the source is the device argument here
        raise RuntimeError(f'Attempted to set the storage of a tensor on device "{self.device}" to a storage on '
                           f'different device "{_device_of(source)}".  This is no longer allowed; the devices '
                           f'must match.')
    mine = _device_of(self)  # (not self.device: a user's torch-function mode may answer another)
    if isinstance(source, EmuTensor):
        if _device_of(source) != mine:
            raise _mismatch(func, mine, _device_of(source))
        self._data.set_(source._data, *args[2:], **kwargs)
        return sync(self)
    if isinstance(source, torch.Tensor):
        raise _mismatch(func, mine, source.device)
    source = getattr(source, "_untyped_storage", source)  # (a TypedStorage)
    host = host_of(source)
    if host is None:
        if source.device.type != "cpu":
            raise _mismatch(func, mine, source.device)
        raise RuntimeError(f"set_: {mine} tensors cannot use a cpu storage; copy the data with "
                           f".to('{mine}')")
    if source.device != mine:
        raise RuntimeError(f'Attempted to set the storage of a tensor on device "{mine}" to a storage '
                           f'on different device "{source.device}".  This is no longer allowed; the devices '
                           f'must match.')
    size = host.nbytes()
    self._data.set_(host, *args[2:], **kwargs)
    # (a size beyond the storage grew the host storage in place, as set_ grows a device's: its device storage
    # is then made anew over the new memory)
    return sync(self, source if host.nbytes() == size else None)


for _op in (aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor,
            aten.set_.source_Tensor_storage_offset):
    SPECIAL[_op] = _set_storage


def _set_empty(func: Any, args: tuple, kwargs: dict) -> Any:
    args[0]._data.set_()
    return sync(args[0])


SPECIAL[aten.set_.default] = _set_empty
