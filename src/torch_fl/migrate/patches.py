"""The Python entry points the CUDA alias patches (see alias.py for the mechanism): Tensor and Module
methods, the ``torch.cuda`` module (cuda_surface.py), AMP, torch.distributed and checkpoint loading. Each ``_install_*``
records its patches on the alias, which restores them exactly on ``disable()``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from ..device import description_for
from .alias_calls import (
    CUDA,
    AliasHooks,
    Mapped,
    calling_frame,
    has_cuda,
    is_cuda,
    is_internal,
    is_ordinal,
    log,
)
from .cuda_api import CUDA_TENSOR_TYPES
from .cuda_surface import ClassAliasMeta, CudaAliasError, install_cuda_module


# Tensor and Module --------------------------------------------------------------------------------
def _install_tensor_and_module(alias: AliasHooks) -> None:
    tensor_to, module_to, pin_memory = torch.Tensor.to, torch.nn.Module.to, torch.Tensor.pin_memory

    tensor_cuda_, module_cuda_ = torch.Tensor.cuda, torch.nn.Module.cuda

    def to(tensor, *args, **kwargs):
        if alias.recorder is None and not has_cuda(args, kwargs, True):
            return tensor_to(tensor, *args, **kwargs)
        caller = calling_frame(sys._getframe(1))
        args, kwargs, mapped = alias.map_args(args, kwargs, caller, ordinal_first=True)
        if mapped is not None:
            alias.note("Tensor.to", mapped, caller)
        return tensor_to(tensor, *args, **kwargs)

    def tensor_cuda(tensor, device=None, non_blocking=False, memory_format=torch.preserve_format):
        caller = calling_frame(sys._getframe(1))
        if alias.bypass(caller):
            return tensor_cuda_(tensor, device, non_blocking, memory_format=memory_format)
        target = alias.map_any(device if device is not None else CUDA)
        alias.note("Tensor.cuda", Mapped(device if device is not None else CUDA, target, True), caller)
        return tensor_to(tensor, target, non_blocking=non_blocking, memory_format=memory_format)

    def tensor_pin_memory(tensor, *args, **kwargs):
        caller = calling_frame(sys._getframe(1))
        if alias.bypass(caller) or not alias.host_memory():
            return pin_memory(tensor, *args, **kwargs)
        # Pinned pages speed host-to-accelerator copies; a host target makes no copy to speed up.
        alias.note("Tensor.pin_memory", Mapped(CUDA, alias.target, True), caller)
        return tensor

    def module_to_(module, *args, **kwargs):
        caller = sys._getframe(1)
        args, kwargs, mapped = alias.map_args(args, kwargs, caller, ordinal_first=True)
        if mapped is not None:
            alias.note("Module.to", mapped, caller)
        return module_to(module, *args, **kwargs)

    def module_cuda(module, device=None):
        caller = sys._getframe(1)
        if alias.bypass(caller):
            return module_cuda_(module, device)
        target = alias.map_any(device if device is not None else CUDA)
        alias.note("Module.cuda", Mapped(device if device is not None else CUDA, target, True), caller)
        return module_to(module, target)

    alias.wrappers.update((to, tensor_cuda, tensor_pin_memory))
    for owner, name, replacement, original in (
            (torch.Tensor, "to", to, tensor_to), (torch.Tensor, "cuda", tensor_cuda, tensor_cuda_),
            (torch.Tensor, "pin_memory", tensor_pin_memory, pin_memory),
            (torch.nn.Module, "to", module_to_, module_to), (torch.nn.Module, "cuda", module_cuda, module_cuda_)):
        functools.update_wrapper(replacement, original)
        alias.patch(owner, name, replacement)

    set_default_device = torch.set_default_device

    @functools.wraps(set_default_device)
    def set_default_device_(device):
        caller = sys._getframe(1)
        if (is_cuda(device) or is_ordinal(device)) and not alias.bypass(caller):
            mapped = Mapped(device, alias.map_device(device), True)
            alias.note("torch.set_default_device", mapped, caller)
            device = alias.map_device(device)
        return set_default_device(device)

    alias.patch(torch, "set_default_device", set_default_device_)

    # Storages: `torch.load(f, map_location=lambda s, loc: s.cuda())` moves each storage itself.
    for owner in (torch.storage._StorageBase, torch.storage.TypedStorage):
        alias.patch(owner, "cuda", _storage_cuda(alias, owner.cuda))
    storage_new = torch.UntypedStorage.__new__

    def untyped_storage_new(cls, *args, **kwargs):
        device = kwargs.get("device")
        caller = sys._getframe(1)
        if device is not None and (is_cuda(device) or is_ordinal(device)) and not alias.bypass(caller):
            mapped = alias.map_device(device)
            alias.note("torch.UntypedStorage", Mapped(device, mapped, True), caller)
            kwargs = {**kwargs, "device": mapped}
        return storage_new(cls, *args, **kwargs)

    alias.patch(torch.UntypedStorage, "__new__", staticmethod(untyped_storage_new))


def _storage_cuda(alias: AliasHooks, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def cuda(storage, device=None, non_blocking=False):
        caller = sys._getframe(1)
        if alias.bypass(caller):
            return original(storage, device, non_blocking)
        target = alias.map_any(device if device is not None else CUDA)
        alias.note("Storage.cuda", Mapped(device if device is not None else CUDA, target, True), caller)
        # As torch.load restores a storage saved there: through the deserializers registered per device
        # type (an emulated device has no storage.to of its own; a vendor plugin registers its own).
        from torch.serialization import default_restore_location

        return default_restore_location(storage, str(target))

    return cuda


# Legacy type names and streams on tensors ---------------------------------------------------------
def _cuda_type_dtype(value: Any) -> torch.dtype | None:
    """The dtype a legacy CUDA type names (`torch.cuda.HalfTensor`, "torch.cuda.HalfTensor"), else None."""
    name = value if isinstance(value, str) else getattr(value, "__name__", None) \
        if getattr(value, "__module__", "").startswith("torch.cuda") else None
    if not isinstance(name, str):
        return None
    short = name.removeprefix("torch.cuda.")
    if short == name and isinstance(value, str):
        return None  # "torch.HalfTensor": not CUDA
    dtype = CUDA_TENSOR_TYPES.get(short)
    return getattr(torch, dtype) if dtype is not None else None


def _install_legacy_types(alias: AliasHooks) -> None:
    tensor_type, record_stream = torch.Tensor.type, torch.Tensor.record_stream
    set_default_tensor_type = torch.set_default_tensor_type

    @functools.wraps(tensor_type)
    def type_(tensor, dtype=None, non_blocking=False, **kwargs):
        caller = sys._getframe(1)
        wanted = _cuda_type_dtype(dtype) if dtype is not None else None
        if wanted is None or alias.bypass(caller):
            return tensor_type(tensor, dtype, non_blocking, **kwargs) if dtype is not None else tensor_type(tensor)
        alias.note("Tensor.type", Mapped(dtype if isinstance(dtype, str) else f"torch.cuda.{dtype.__name__}",
                                           alias.target, True), caller)
        return tensor.to(alias.target, wanted, non_blocking=non_blocking)

    @functools.wraps(record_stream)
    def record_stream_(tensor, stream):
        if isinstance(stream, torch.Stream):
            return record_stream(tensor, stream)
        # torch.fl's host stream (the target has one queue): no other queue can reuse this memory early.
        return None

    set_device = [False]  # whether a CUDA type made the target the default device

    @functools.wraps(set_default_tensor_type)
    def set_default_tensor_type_(t):
        caller = sys._getframe(1)
        wanted = _cuda_type_dtype(t)
        if wanted is None or alias.bypass(caller):
            if set_device[0]:  # a host type after a CUDA one: tensors are made on the host again, as in torch
                torch.set_default_device(None)
                set_device[0] = False
            return set_default_tensor_type(t)
        set_device[0] = True
        alias.note("torch.set_default_tensor_type", Mapped(t if isinstance(t, str) else f"torch.cuda.{t.__name__}",
                                                             alias.target, True), caller)
        torch.set_default_dtype(wanted)
        torch.set_default_device(alias.target)
        return None

    alias.wrappers.update((type_, record_stream_))
    alias.patch(torch.Tensor, "type", type_)
    alias.patch(torch.Tensor, "record_stream", record_stream_)
    alias.patch(torch, "set_default_tensor_type", set_default_tensor_type_)


# torch.Generator and torch.backends.cuda flags ----------------------------------------------------
def _install_generator(alias: AliasHooks) -> None:
    original = torch.Generator

    def __new__(cls, device: Any = "cpu"):
        caller = sys._getframe(1)
        if (is_cuda(device) or is_ordinal(device)) and not alias.bypass(caller):
            mapped = alias.map_device(device)
            alias.note("torch.Generator", Mapped(device, mapped, True), caller)
            device = mapped
        return original(device=device)

    alias.patch(torch, "Generator", ClassAliasMeta(
        "Generator", (), {"__new__": __new__, "_stands_for": original, "__doc__": original.__doc__,
                          "__module__": "torch"}))


def _install_backend_flags(alias: AliasHooks) -> None:
    """torch.backends.cuda / cudnn settings keep working (they only reach CUDA kernels); setting one is
    recorded for the alias report."""
    def recording_setattr(owner_name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def __setattr__(self, name, value):
            if not name.startswith("_") and not alias.real_cuda:
                alias.answered(f"{owner_name}.{name} = {value!r}", "accepted, no effect off CUDA")
            return original(self, name, value)

        return __setattr__

    for module, owner_name in ((torch.backends.cudnn, "torch.backends.cudnn"),
                               (getattr(torch.backends.cuda, "matmul", None), "torch.backends.cuda.matmul")):
        if module is not None:
            cls = type(module)
            alias.patch(cls, "__setattr__", recording_setattr(owner_name, cls.__setattr__))
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp",
                 "preferred_linalg_library", "preferred_blas_library"):
        original = getattr(torch.backends.cuda, name, None)
        if original is not None:
            alias.patch(torch.backends.cuda, name, _recorded_flag(alias, name, original))


def _recorded_flag(alias: AliasHooks, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def flag(*args, **kwargs):
        caller = sys._getframe(1)
        if args and not alias.real_cuda and not is_internal(caller.f_code.co_filename):
            alias.answered(f"torch.backends.cuda.{name}({', '.join(map(repr, args))})",
                           "accepted (a CUDA setting)")
        return original(*args, **kwargs)

    return flag


# Autocast and GradScaler ---------------------------------------------------------------------------
def _autocast_args(alias: AliasHooks, call: str, device_type: Any, dtype: torch.dtype | None,
                   caller: FrameType | None) -> tuple[Any, torch.dtype | None]:
    if device_type != CUDA or alias.bypass(caller):
        if alias.recorder is not None:
            alias.note(call, Mapped(device_type, device_type, False), caller)
        return device_type, dtype
    desc = description_for(alias.target)
    chosen = dtype
    if dtype is None or str(dtype).removeprefix("torch.") not in desc.dtypes:
        chosen = getattr(torch, desc.autocast_dtype)
        if dtype is not None:
            log.info("autocast: %s does not support %s; using its autocast dtype %s", desc.name, dtype, chosen)
    alias.note(call, Mapped(CUDA, f"{alias.target.type} ({str(chosen).removeprefix('torch.')})", True), caller)
    return alias.target.type, chosen


def _install_amp(alias: AliasHooks) -> None:
    base, scaler = torch.amp.autocast_mode.autocast, torch.amp.GradScaler

    class autocast(base):
        __doc__ = base.__doc__

        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            device_type, dtype = _autocast_args(alias, "torch.autocast", device_type, dtype, sys._getframe(1))
            super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    class cuda_autocast(base):
        """torch.cuda.amp.autocast: no dtype means the target's autocast dtype (CUDA's float16 default
        is a CUDA fact, not a request)."""

        def __init__(self, enabled=True, dtype=None, cache_enabled=True):
            device_type, dtype = _autocast_args(alias, "torch.cuda.amp.autocast", CUDA, dtype, sys._getframe(1))
            super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def scaler_device(call: str, device: str, caller: FrameType | None) -> str:
        if device != CUDA or alias.bypass(caller):
            return device
        alias.note(call, Mapped(CUDA, alias.target.type, True), caller)
        return alias.target.type

    class GradScaler(scaler):
        __doc__ = scaler.__doc__

        def __init__(self, device="cuda", init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                     growth_interval=2000, enabled=True):
            device = scaler_device("torch.amp.GradScaler", device, sys._getframe(1))
            super().__init__(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    class CudaGradScaler(scaler):
        __doc__ = "torch.cuda.amp.GradScaler: a torch.amp.GradScaler for the alias target."

        def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                     enabled=True):
            device = scaler_device("torch.cuda.amp.GradScaler", CUDA, sys._getframe(1))
            super().__init__(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    autocast.__name__ = autocast.__qualname__ = "autocast"
    cuda_autocast.__name__ = cuda_autocast.__qualname__ = "autocast"
    CudaGradScaler.__name__ = CudaGradScaler.__qualname__ = "GradScaler"
    alias.patch(torch, "autocast", autocast)
    alias.patch(torch.amp, "autocast", autocast)
    alias.patch(torch.amp, "GradScaler", GradScaler)
    if "GradScaler" in vars(torch):
        alias.patch(torch, "GradScaler", GradScaler)
    cuda_amp = getattr(torch.cuda, "amp", None)  # deprecated since torch 2.4
    if cuda_amp is not None:
        alias.patch(cuda_amp, "autocast", cuda_autocast)
        alias.patch(cuda_amp, "GradScaler", CudaGradScaler)


# torch.distributed ----------------------------------------------------------------------------------
def _backend_for(alias: AliasHooks, backend: str) -> str:
    from ..runtime import dist_backend

    chosen = dist_backend(alias.target)
    available = getattr(torch.distributed, f"is_{chosen}_available", None)
    if available is not None and not available():
        desc = description_for(alias.target)
        raise CudaAliasError(
            f"the CUDA code asks for the '{backend}' backend; the CUDA alias maps it to '{chosen}', the "
            f"collective backend of {alias.target}'s description '{desc.name}' (collectives.backend), but this "
            f"build of torch has no '{chosen}'. Fix: run on a machine with {chosen}, or target a device whose "
            f"backend this build has (FL_DEVICE=cpu: gloo).")
    if ":" not in backend:
        return chosen
    # 'cpu:gloo,cuda:nccl': the CUDA entry becomes the target's, other device types keep theirs.
    pairs = dict(item.split(":", 1) for item in backend.split(","))
    pairs.pop(CUDA, None)
    pairs.setdefault(alias.target.type, chosen)
    return ",".join(f"{k}:{v}" for k, v in pairs.items())


def _install_distributed(alias: AliasHooks) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return

    def with_backend(original: Callable[..., Any], call: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            backend = args[0] if args else kwargs.get("backend")
            caller = sys._getframe(1)
            bypass = alias.bypass(caller)
            if isinstance(backend, str) and "nccl" in backend.lower() and not bypass:
                chosen = _backend_for(alias, backend)
                alias.note(call, Mapped(backend, chosen, True), caller)
                args, kwargs = ((chosen, *args[1:]), kwargs) if args else (args, {**kwargs, "backend": chosen})
            device_id = kwargs.get("device_id")
            if device_id is not None and (is_cuda(device_id) or is_ordinal(device_id)) and not bypass:
                mapped = alias.map_device(device_id)
                alias.note(call, Mapped(device_id, mapped, True), caller)
                # device_id binds the process to one accelerator; the host has none to bind.
                kwargs = {**kwargs, "device_id": mapped if mapped.index is not None else None}
            # FSDP is too heavy to import with the alias (~1 s); scripts import it before they init the
            # process group, so this is where its patch goes in.
            _install_fsdp(alias)
            return original(*args, **kwargs)

        return wrapper

    for name in ("init_process_group", "new_group"):
        alias.patch(dist, name, with_backend(getattr(dist, name), f"torch.distributed.{name}"))

    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__

    @functools.wraps(ddp_init)
    def ddp_init_(self, module, device_ids=None, output_device=None, *args, **kwargs):
        caller = sys._getframe(1)
        if device_ids is not None and not alias.bypass(caller):
            mapped = [alias.map_any(d) for d in device_ids]
            alias.note("DistributedDataParallel", Mapped(f"device_ids={list(device_ids)}",
                                                           [str(d) for d in mapped], True), caller)
            if all(d.index is None for d in mapped):
                device_ids, output_device = None, None  # DDP takes no device ids for host modules
            else:
                device_ids = mapped
                output_device = alias.map_any(output_device) if output_device is not None else None
        ddp_init(self, module, device_ids, output_device, *args, **kwargs)

    alias.patch(ddp, "__init__", ddp_init_)
    _install_device_mesh(alias)


def _install_fsdp(alias: AliasHooks) -> None:
    """FullyShardedDataParallel(device_id=N / "cuda:N" / a CUDA device): the mapped device, none on the
    host (FSDP then keeps the module where it is). Once per alias, when torch.distributed.fsdp is loaded."""
    module = sys.modules.get("torch.distributed.fsdp")
    fsdp = getattr(module, "FullyShardedDataParallel", None)
    if fsdp is None or alias.patched(fsdp):
        return
    fsdp_init = fsdp.__init__

    @functools.wraps(fsdp_init)
    def fsdp_init_(self, *args, **kwargs):
        device_id = kwargs.get("device_id")
        caller = sys._getframe(1)
        if device_id is not None and (is_cuda(device_id) or is_ordinal(device_id)) and not alias.bypass(caller):
            mapped = alias.map_device(device_id)
            alias.note("FullyShardedDataParallel", Mapped(f"device_id={device_id}", mapped, True), caller)
            kwargs = {**kwargs, "device_id": mapped if mapped.index is not None else None}
        fsdp_init(self, *args, **kwargs)

    alias.patch(fsdp, "__init__", fsdp_init_)


def _install_device_mesh(alias: AliasHooks) -> None:
    """init_device_mesh("cuda", ...) and DeviceMesh("cuda", ...): a mesh of the target's device type
    (torch builds the mesh's process groups and device handle from that type)."""
    mesh_module = sys.modules.get("torch.distributed.device_mesh")  # imported by torch.distributed itself
    if mesh_module is None or not hasattr(mesh_module, "init_device_mesh"):
        return

    def mapped_type(call: str, device_type: Any, caller: FrameType | None) -> Any:
        if device_type != CUDA or alias.bypass(caller):
            return device_type
        alias.note(call, Mapped(CUDA, alias.target.type, True), caller)
        return alias.target.type

    init_device_mesh = mesh_module.init_device_mesh

    @functools.wraps(init_device_mesh)
    def init_device_mesh_(device_type, *args, **kwargs):
        device_type = mapped_type("init_device_mesh", device_type, sys._getframe(1))
        return init_device_mesh(device_type, *args, **kwargs)

    mesh_init = mesh_module.DeviceMesh.__init__

    @functools.wraps(mesh_init)
    def mesh_init_(self, device_type, *args, **kwargs):
        mesh_init(self, mapped_type("DeviceMesh", device_type, sys._getframe(1)), *args, **kwargs)

    alias.patch(mesh_module, "init_device_mesh", init_device_mesh_)
    alias.patch(mesh_module.DeviceMesh, "__init__", mesh_init_)


# torch.load ----------------------------------------------------------------------------------------
def _install_loading(alias: AliasHooks) -> None:
    load = torch.load
    from torch.serialization import default_restore_location

    @functools.wraps(load)
    def load_(f, map_location=None, *args, **kwargs):
        caller = sys._getframe(1)
        if alias.bypass(caller) or (isinstance(map_location, (str, torch.device)) and not is_cuda(map_location)):
            return load(f, map_location, *args, **kwargs)
        if is_cuda(map_location) or is_ordinal(map_location):
            mapped = alias.map_device(map_location)
            alias.note("torch.load", Mapped(f"map_location={map_location}", mapped, True), caller)
            return load(f, mapped, *args, **kwargs)
        if map_location is None or isinstance(map_location, dict):
            # A dict, not a callable: torch refuses callables for tensors rebuilt from a device without
            # storages (an emulated device's checkpoint).
            return load(f, _CudaLocations(alias, map_location or {}, caller), *args, **kwargs)
        return load(f, _restore_cuda_storages(alias, map_location, caller, default_restore_location),
                    *args, **kwargs)

    alias.patch(torch, "load", load_)


class _CudaLocations(dict):
    """A map_location dict (the caller's, if any) that also sends every CUDA location to the alias
    target; torch asks it with `.get(location, location)` for each storage."""

    def __init__(self, alias: AliasHooks, given: dict, caller: FrameType | None):
        super().__init__(given)
        self.alias, self.caller, self.noted = alias, caller, False

    def get(self, location: Any, default: Any = None) -> Any:
        found = super().get(location, default)
        if isinstance(found, torch.device):
            found = str(found)
        if not is_cuda(found):
            return found
        mapped = self.alias.map_device(found)
        if not self.noted:
            self.noted = True
            self.alias.note("torch.load", Mapped(f"storage on {found}", mapped, True), self.caller)
        return str(mapped)


def _restore_cuda_storages(alias: AliasHooks, map_location: Any, caller: FrameType | None,
                           default_restore_location: Callable[..., Any]) -> Callable[..., Any]:
    """A map_location callable that sends storages saved on CUDA to the alias target, on top of what
    the caller's map_location (None, a dict or a callable) does."""
    noted = False

    def restore(storage, location):
        nonlocal noted
        if callable(map_location):
            result = map_location(storage, location)
            if result is not None:
                return result
        elif isinstance(map_location, dict):
            location = map_location.get(location, location)
        if isinstance(location, torch.device):
            location = str(location)
        if is_cuda(location):
            mapped = alias.map_device(location)
            if not noted:
                noted = True
                alias.note("torch.load", Mapped(f"storage on {location}", mapped, True), caller)
            location = str(mapped)
        return default_restore_location(storage, location)

    return restore


# Module API ----------------------------------------------------------------------------------------


def install_all(alias: AliasHooks) -> None:
    _install_tensor_and_module(alias)
    install_cuda_module(alias)
    _install_generator(alias)
    _install_legacy_types(alias)
    _install_backend_flags(alias)
    _install_amp(alias)
    _install_distributed(alias)
    _install_loading(alias)
