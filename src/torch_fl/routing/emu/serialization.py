"""``torch.save`` / ``torch.load`` (every map_location form) and storage calls (``set_``) on the
emulated device; the device storages themselves are in storage.py."""

from __future__ import annotations

from typing import Any

import torch

from . import tensor as _tensor
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
    _register_jit_save()


def _register_jit_save() -> None:
    """``torch.jit.save`` of a module with tensors on the emulated device. TorchScript's C++ writer copies
    each tensor's data to the host through ``at::empty({0}, device).set_(tensor.storage(), ...)``: it reads
    the storage of the tensor itself, which for a wrapper is the memoryless storage PyTorch made with it
    until the wrapper takes its device storage (storage.py). Each device tensor of the module takes it first,
    as `untyped_storage()` gives it, so the writer reads the data as it reads a real device's
    (torch_musa's tests/unittest/jit/test_jit_save_load.py saves a traced model on the device)."""
    from torch.jit._script import RecursiveScriptModule, ScriptModule

    def with_device_storages(module: Any) -> None:
        for value in module.state_dict(keep_vars=True).values():
            if isinstance(value, EmuTensor):
                value.untyped_storage()

    def wrapped(plain: Any) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            with_device_storages(self)
            return plain(self, *args, **kwargs)

        method._torchfl = True  # type: ignore[attr-defined]
        return method

    # (ScriptModule holds copies of RecursiveScriptModule's methods: traced modules are ScriptModules)
    for cls in (RecursiveScriptModule, ScriptModule):
        for name in ("save", "save_to_buffer"):
            plain = cls.__dict__.get(name)
            if plain is not None and not getattr(plain, "_torchfl", False):
                setattr(cls, name, wrapped(plain))
    if "_apply" not in ScriptModule.__dict__:
        ScriptModule._apply = _script_apply  # type: ignore[method-assign]
    if "__call__" not in ScriptModule.__dict__:
        ScriptModule.__call__ = _script_call  # type: ignore[method-assign]
    import torch.jit._serialization as jit_serialization

    if not getattr(jit_serialization.load, "_torchfl", False):
        plain_load = jit_serialization.load

        def load(f: Any, map_location: Any = None, _extra_files: Any = None, _restore_shapes: bool = False) -> Any:
            return _jit_load(plain_load, f, map_location, _extra_files, _restore_shapes)

        load._torchfl = True  # type: ignore[attr-defined]
        load.__doc__ = plain_load.__doc__
        jit_serialization.load = torch.jit.load = load


def _jit_load(plain: Any, f: Any, map_location: Any, extra_files: Any, restore_shapes: bool) -> Any:
    """``torch.jit.load`` where tensors are restored onto the emulated device (saved there, or ``map_location``
    naming it). TorchScript's C++ reader makes such a tensor with ``at::empty({0}, device)`` and sets its storage
    on the TensorImpl itself, past the dispatcher, so the wrapper kept its empty data (every parameter came back
    with size 0). The tensors are read on the host and moved where the reader put them, as a real device's
    reader copies them there."""
    where = None if map_location is None else torch.device(map_location) if not isinstance(map_location, dict) \
        else None
    if where is not None and where.type != backend_name():
        return plain(f, map_location, extra_files, restore_shapes)
    if not isinstance(f, (str, bytes)) and not hasattr(f, "__fspath__"):
        import io

        f = io.BytesIO(f.read())  # (read twice below)
    module = plain(f, map_location, extra_files, restore_shapes)
    placed = [(name, t) for name, t in (*module.named_parameters(), *module.named_buffers())
              if isinstance(t, EmuTensor)]
    if not placed:
        return module
    if hasattr(f, "seek"):
        f.seek(0)
    host = plain(f, "cpu", None, restore_shapes)
    on_host = dict((*host.named_parameters(), *host.named_buffers()))
    with torch.no_grad():
        for name, tensor in placed:
            prefix, _, leaf = name.rpartition(".")
            owner = module
            for part in prefix.split(".") if prefix else ():  # (ScriptModules have no get_submodule)
                owner = getattr(owner, part)
            value = on_host[name].to(tensor.device)
            if leaf in owner._parameters:
                owner._parameters[leaf] = torch.nn.Parameter(value, requires_grad=tensor.requires_grad)
            else:
                owner._buffers[leaf] = value
    return module


_LOST_TEXT = "RuntimeError: \n"


def _script_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A script module's call that keeps the text of an error the emulated device raised: TorchScript's interpreter
    reports it as "RuntimeError: " with nothing after (it drops the text of any exception a Python backend raises),
    where on the chip the vendor's C++ message is there (torch_musa's test_jit_save_load.py matches its
    convolution's device check in it). The text goes back where the interpreter left it empty."""
    _tensor.raised.error = None
    try:
        return torch.nn.Module.__call__(self, *args, **kwargs)
    except RuntimeError as error:
        lost = _tensor.raised.error
        text = str(error)
        if lost is None or not text.endswith(_LOST_TEXT):
            raise
        raise type(error)(text[:-1] + str(lost) + "\n") from None
    finally:
        _tensor.raised.error = None


def _script_apply(self: Any, fn: Any, recurse: bool = True) -> Any:
    """``script_module.to(device)`` where a tensor of the emulated device takes part. nn.Module._apply would swap
    the moved tensor into each Parameter object (an EmuTensor is a wrapper subclass: torch.utils.swap_tensors),
    which a TorchScript module refuses: its C++ object holds each parameter too ("Couldn't swap
    RecursiveScriptModule.weight"). On a real device the move takes PyTorch's other path, a new Parameter in
    the module's slot (the C++ attribute the graph reads); so here. A tensor already where `fn` puts it stays."""
    own = [*self._parameters.items(), *self._buffers.items()]
    tensors = [t for _, t in own if t is not None]
    with torch.no_grad():
        moved = [fn(t) for t in tensors]
    if not any(isinstance(t, EmuTensor) for t in (*tensors, *moved)):
        return torch.nn.Module._apply(self, fn, recurse)
    if recurse:
        for module in self.children():
            module._apply(fn)
    applied = iter(moved)
    for key, param in list(self._parameters.items()):
        if param is None:
            continue
        value = next(applied)
        if value is param:
            continue
        fresh = torch.nn.Parameter(value, requires_grad=param.requires_grad)
        if param.grad is not None:
            with torch.no_grad():
                fresh.grad = fn(param.grad)
        self._parameters[key] = fresh
    for key, buffer in list(self._buffers.items()):
        if buffer is None:
            continue
        value = next(applied)
        if value is not buffer:
            self._buffers[key] = value
    return self


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
