"""Storages of the emulated device: what ``untyped_storage()``, ``data_ptr()``, ``set_``, ``resize_``
and pinned memory give the ecosystem (safetensors, ``save_pretrained``, ``torch.save``, DCP, DataLoader).

An ``EmuTensor`` is made by ``_make_wrapper_subclass``, whose storage has no memory (PyTorch answers
``untyped_storage().data_ptr()`` with "invalid python storage"). The device storage of a host storage
is a storage on ``emu:N`` over the host memory (``_construct_storage_from_data_pointer``) that keeps the
host storage alive (``_host``; PyTorch preserves a storage's Python object, and so its attributes, while
the storage lives), one per host storage: views, tied weights and every wrapper of the same data share
it, as tensors of one allocation share one storage on a real device.

A wrapper gets its device storage when something asks (``untyped_storage()``, ``storage()``,
``torch.save``) or when its shape changes in place (``resize_``, ``out=`` resizing, ``set_``,
``as_strided_``): PyTorch's own CPU ``set_`` kernel then sets the wrapper's storage, sizes, strides and
offset to those of its data. The common op never pays for it (the dispatch's fast path is unchanged).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from . import memory
from .slot import _no_device, backend_name, state

# set_(storage, offset, size, stride) of PyTorch's CPU kernel: it only checks that storage and tensor are
# on one device and sets the metadata, so it serves a wrapper on emu:N and a storage on emu:N alike
_SET_KERNEL: Any = None
_base_storage = torch._C.TensorBase.untyped_storage

# host StorageImpl address -> weak reference of its device storage (the device storage keeps the host
# storage, and so its address, alive: an entry whose storage lives is never stale)
_device: dict[int, Any] = {}


def device_storage(host: torch.UntypedStorage, where: torch.device) -> torch.UntypedStorage:
    """The one device storage of `host` on `where` (made at the first call)."""
    key = host._cdata
    ref = _device.get(key)
    found = ref() if ref is not None else None
    if found is not None and found.data_ptr() == host.data_ptr() and found.nbytes() == host.nbytes() \
            and found.device == where:
        return found
    # (a host storage resized in place has new memory: a new device storage describes it)
    made = torch._C._construct_storage_from_data_pointer(host.data_ptr(), where, host.nbytes())
    made._host = host
    adopt(made, host)
    return made


def adopt(storage: torch.UntypedStorage, host: torch.UntypedStorage) -> None:
    """Make `storage` (a device storage over `host`'s memory) the device storage of `host`."""
    key = host._cdata

    def dropped(ref: Any, key: int = key) -> None:
        if _device.get(key) is ref:
            del _device[key]

    _device[key] = weakref.ref(storage, dropped)


def host_of(storage: Any) -> torch.UntypedStorage | None:
    """The host storage a device storage of the emulator stands for, else None."""
    return getattr(storage, "_host", None)


def host_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor over the memory of `tensor`, a plain tensor on the emulated device (no EmuTensor:
    one PyTorch's C++ made over a device storage, as ``storage._write_file`` (legacy torch.save, pickling a
    storage), ``storage._set_from_file`` (legacy torch.load) and dlpack do). Its memory is host memory;
    the CPU tensor is valid while `tensor` lives."""
    storage = tensor.untyped_storage()
    host = host_of(storage)
    if host is None:
        # (a storage C++ made over device memory without this module: a view of the same host memory)
        host = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), torch.device("cpu"),
                                                            storage.nbytes())
    return torch.empty(0, dtype=tensor.dtype).set_(host, tensor.storage_offset(), tensor.size(), tensor.stride())


def sync(tensor: Any, storage: Any = None) -> Any:
    """Give the wrapper `tensor` the device storage of its data (or `storage`, that device storage) and
    its data's sizes, strides and offset (after the data changed shape or storage in place, or to expose
    the storage). Returns `tensor`."""
    data = tensor._data
    if data.layout is not torch.strided or type(data) is not torch.Tensor:
        return tensor
    if storage is None:
        storage = device_storage(data.untyped_storage(), _device_of(tensor))
    global _SET_KERNEL
    if _SET_KERNEL is None:
        _SET_KERNEL = torch.library.get_kernel("aten::set_.source_Storage_storage_offset", "CPU")
    _SET_KERNEL.call_boxed(torch._C._dispatch_keys(tensor), tensor, storage, data.storage_offset(),
                           list(data.size()), list(data.stride()))
    return tensor


def _device_of(tensor: Any) -> torch.device:
    """The wrapper's device from its index: ``tensor.device`` passes through the user's torch-function
    modes, which may answer another device (ditorch shows every device as 'cuda')."""
    return torch.device(backend_name(), tensor._index)


def untyped_storage(tensor: Any) -> torch.UntypedStorage:
    """``tensor.untyped_storage()`` of an EmuTensor: its device storage, shared with every tensor that
    shares its data."""
    data = tensor._data
    if type(data) is not torch.Tensor:  # (a FakeTensor under torch.compile: the wrapper's own)
        return _base_storage(tensor)
    if data.layout is not torch.strided:
        return data.untyped_storage()  # (raises as PyTorch does for a sparse tensor)
    storage = device_storage(data.untyped_storage(), _device_of(tensor))
    if _base_storage(tensor)._cdata != storage._cdata:
        sync(tensor, storage)
    return storage


# Pinned host memory ----------------------------------------------------------------------------------
# host StorageImpl address -> weak reference of the pinned storage (a weak reference keeps the address of
# its storage from being reused, so a live entry is always the storage it names)
_pinned: dict[int, Any] = {}


def pin(tensor: torch.Tensor) -> torch.Tensor:
    """``pin_memory()`` for the emulated device: a host copy whose storage is recorded as pinned."""
    from torch.multiprocessing.reductions import StorageWeakRef

    pinned = tensor.clone(memory_format=torch.contiguous_format) if tensor.layout is torch.strided else \
        tensor.clone()
    if len(_pinned) > 256:
        for key in [k for k, ref in _pinned.items() if ref.expired()]:
            del _pinned[key]
    if pinned.layout is torch.strided:
        storage = pinned.untyped_storage()
        _pinned[storage._cdata] = StorageWeakRef(storage)
    return pinned


def is_pinned(tensor: torch.Tensor) -> bool:
    if tensor.layout is not torch.strided:
        return False
    ref = _pinned.get(tensor.untyped_storage()._cdata)
    return ref is not None and not ref.expired()


# torch.UntypedStorage(n, device="emu") -------------------------------------------------------------------
_plain_new = torch._C.StorageBase.__new__


def _new_storage(cls: Any, *args: Any, device: Any = None, **kwargs: Any) -> Any:
    """A storage made on the emulated device (``storage.to("emu")``, ``storage.emu()``, a map_location
    of ``lambda storage, loc: storage.to(device)``): host memory and its device storage. PyTorch would
    ask PrivateUse1's allocator, which a Python backend has none of (the process would crash)."""
    if device is not None:
        where = torch.device(device) if not isinstance(device, int) else None
        if where is not None and where.type == backend_name():
            if where.index is None:
                where = torch.device(where.type, state.current)
            if where.index >= state.count:
                raise _no_device(where.index)
            host = _plain_new(torch.UntypedStorage, *args, **kwargs)
            return device_storage(host, where)
        kwargs["device"] = device
    return _plain_new(cls, *args, **kwargs)


# Storage methods PyTorch implements in C++ for every device --------------------------------------------
# (each asks the device's allocator, or makes a storage this module does not know: answered for storages
# of the emulated device, and passed to PyTorch's own method for every other storage)
_plain_getitem = torch.UntypedStorage.__getitem__
_plain_storage_new = torch._C.StorageBase.new
_plain_resize = torch._C.StorageBase.resize_


def _emulated(storage: Any) -> bool:
    return storage.device.type == backend_name()


def _storage_new(self: Any) -> Any:
    """``storage.new()``: an empty storage on the same device. PyTorch's C++ asks the device's allocator,
    which PrivateUse1 has none of under a Python backend (a segfault)."""
    if _emulated(self):
        return torch.UntypedStorage(0, device=self.device)
    return _plain_storage_new(self)


def _storage_getitem(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``storage[i:j]``: a device storage over the slice of the host memory (PyTorch's C++ makes one
    this module would not know the host storage of: ``set_`` and copies of it would fail)."""
    if _emulated(self) and args and isinstance(args[0], slice):
        host = host_of(self)
        if host is not None:
            return device_storage(_plain_getitem(host, *args, **kwargs), self.device)
    return _plain_getitem(self, *args, **kwargs)


def _storage_resize(self: Any, size: int) -> Any:
    """``storage.resize_(n)`` on the emulated device (FSDP2 frees and regrows parameter storages so).
    PyTorch would ask PrivateUse1's hooks for ``resizePrivateUse1Bytes``, which Python hooks cannot
    provide (torch 2.13): the host storage is resized in place (every tensor of that data sees it, as every
    tensor of one device storage does), and this storage takes the host's new memory."""
    host = host_of(self) if _emulated(self) else None
    if host is None:
        return _plain_resize(self, size)
    if not isinstance(size, int) or size < 0:
        raise RuntimeError(f"resize_: expected a non-negative number of bytes, got {size!r}")
    old_key, old_size = host.data_ptr(), host.nbytes()
    _plain_resize(host, size)  # (raises as PyTorch does for a storage that is not resizable)
    memory.resized(host, old_key, old_size, self.device.index or 0)
    # the device StorageImpl must describe the new memory in place (tensors and PyTorch hold it, not this
    # Python object): swap its data pointer and size with a storage over the new host memory, through an
    # empty one (PyTorch swaps only storages of one size, or with an empty one)
    empty = torch._C._construct_storage_from_data_pointer(0, self.device, 0)
    self._swap_data_ptr_(empty)
    fresh = torch._C._construct_storage_from_data_pointer(host.data_ptr(), self.device, host.nbytes())
    self._swap_data_ptr_(fresh)
    adopt(self, host)
    return self


def _generate_storage_methods() -> None:
    """``storage.npu()`` / ``.mlu()`` / ``.emu()`` and ``is_npu``: what the vendor's plugin adds to storages
    (as ``storage.cuda()`` exists for CUDA); PyTorch's generator of them, which a Python backend does not
    run (it leaves storages out by default)."""
    from torch.utils.backend_registration import _generate_storage_methods_for_privateuse1_backend

    name = backend_name()
    if not hasattr(torch.storage._StorageBase, name):
        _generate_storage_methods_for_privateuse1_backend(name)


def install() -> None:
    """Storages made on the emulated device by PyTorch's own storage code (once per process)."""
    if torch.UntypedStorage.__dict__.get("__new__") is None:
        torch.UntypedStorage.__new__ = _new_storage  # type: ignore[method-assign]
        torch.UntypedStorage.new = _storage_new  # type: ignore[method-assign]
        torch.UntypedStorage.__getitem__ = _storage_getitem  # type: ignore[method-assign]
        torch.UntypedStorage.resize_ = _storage_resize  # type: ignore[method-assign]
        _generate_storage_methods()
