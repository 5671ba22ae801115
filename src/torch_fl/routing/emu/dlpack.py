"""DLPack on the emulated device, as torch_npu has it (its ``torch_npu/utils/dlpack.py`` replaces
``to_dlpack`` / ``from_dlpack`` with its own converter; its test/npu/test_dlpack.py round-trips npu tensors
of every dtype, contiguous or not, sharing memory; Ascend's API page still marks both unsupported, and the
emulated chip follows the vendor's tests).

A device tensor is exported as PyTorch exports a PrivateUse1 tensor (``kDLExtDev``, the device index, the
data pointer: here host memory), and a capsule of the emulated device imports as an EmuTensor over that
same memory (``data_ptr()`` equal, writes seen both ways). Host tensors and capsules of other devices go to
PyTorch's own functions unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.dlpack as _torch_dlpack

from .slot import backend_name

_original_to: Any = None
_original_from: Any = None


def to_dlpack(tensor: torch.Tensor) -> Any:
    """``torch.utils.dlpack.to_dlpack`` for a device tensor: a ``kDLExtDev`` capsule over its memory."""
    from . import storage
    from .tensor import EmuTensor

    if isinstance(tensor, EmuTensor):
        # the wrapper takes the device storage of its data first (PyTorch's converter reads the wrapper's
        # own storage, sizes and strides, which have no memory until then)
        storage.untyped_storage(tensor)
        if tensor.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        if tensor.is_conj() or tensor.is_neg():
            raise BufferError("Can't export tensors with the conjugate or negative bit set; call "
                              "resolve_conj() / resolve_neg() first")
    return _original_to(tensor)


def from_dlpack(ext_tensor: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``torch.from_dlpack`` / ``torch.utils.dlpack.from_dlpack``: a capsule (or a tensor) of the emulated
    device becomes an EmuTensor over the same memory; anything else is PyTorch's own import."""
    from .tensor import EmuTensor

    if isinstance(ext_tensor, EmuTensor):  # (PyTorch would ask __dlpack_device__, which knows no 'npu')
        if args or kwargs:
            return _original_from(ext_tensor.detach(), *args, **kwargs)
        ext_tensor = to_dlpack(ext_tensor.detach())
    if type(ext_tensor).__name__ != "PyCapsule":
        return _original_from(ext_tensor, *args, **kwargs)
    imported = torch._C._from_dlpack(ext_tensor)
    if imported.device.type != backend_name() or isinstance(imported, EmuTensor):
        return imported
    return _adopt(imported)


def _adopt(imported: torch.Tensor) -> torch.Tensor:
    """The EmuTensor over the memory of `imported` (a plain device tensor PyTorch's C++ made from a
    capsule, which owns the capsule's deleter: kept alive by the host storage's Python object, which
    PyTorch keeps while the storage lives)."""
    from .storage import device_storage
    from .tensor import _wrap

    device = imported.untyped_storage()
    host = torch._C._construct_storage_from_data_pointer(device.data_ptr(), torch.device("cpu"), device.nbytes())
    host._owner = device  # (the memory's owner: the exporter's tensor, through the capsule's deleter)
    data = torch.empty(0, dtype=imported.dtype).set_(host, imported.storage_offset(), imported.size(),
                                                    imported.stride())
    device_storage(host, imported.device)
    return _wrap(data, imported.device.index or 0)


def install() -> None:
    """Replace PyTorch's DLPack functions with the ones above (once per process), where torch_npu does."""
    global _original_to, _original_from
    if _original_to is not None:
        return
    _original_to, _original_from = _torch_dlpack.to_dlpack, _torch_dlpack.from_dlpack
    _torch_dlpack.to_dlpack = to_dlpack
    _torch_dlpack.from_dlpack = from_dlpack
    torch.from_dlpack = from_dlpack
    if hasattr(torch, "to_dlpack"):
        torch.to_dlpack = to_dlpack
