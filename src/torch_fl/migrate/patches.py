"""The Python entry points the CUDA alias patches (see alias.py for the mechanism): Tensor and Module
methods, the ``torch.cuda`` module, AMP, torch.distributed and checkpoint loading. Each ``_install_*``
records its patches on the alias, which restores them exactly on ``disable()``."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

import torch

from ..device import description_for
from .alias import _CUDA, CudaAlias, _caller, _has_cuda, _is_cuda, _is_ordinal, _live, _log, _Mapped


# Tensor and Module --------------------------------------------------------------------------------
def _install_tensor_and_module(alias: CudaAlias) -> None:
    tensor_to, module_to, pin_memory = torch.Tensor.to, torch.nn.Module.to, torch.Tensor.pin_memory

    tensor_cuda_, module_cuda_ = torch.Tensor.cuda, torch.nn.Module.cuda

    def to(tensor, *args, **kwargs):
        if alias._recorder is None and not _has_cuda(args, kwargs):
            return tensor_to(tensor, *args, **kwargs)
        caller = _caller(sys._getframe(1))
        args, kwargs, mapped = alias._map_args(args, kwargs, caller)
        if mapped is not None:
            alias._note("Tensor.to", mapped, caller)
        return tensor_to(tensor, *args, **kwargs)

    def tensor_cuda(tensor, device=None, non_blocking=False, memory_format=torch.preserve_format):
        caller = _caller(sys._getframe(1))
        if alias._bypass(caller):
            return tensor_cuda_(tensor, device, non_blocking, memory_format=memory_format)
        target = alias._map_any(device if device is not None else _CUDA)
        alias._note("Tensor.cuda", _Mapped(device if device is not None else _CUDA, target, True), caller)
        return tensor_to(tensor, target, non_blocking=non_blocking, memory_format=memory_format)

    def tensor_pin_memory(tensor, *args, **kwargs):
        caller = _caller(sys._getframe(1))
        if alias._bypass(caller) or not alias._host():
            return pin_memory(tensor, *args, **kwargs)
        # Pinned pages speed host-to-accelerator copies; a host target makes no copy to speed up.
        alias._note("Tensor.pin_memory", _Mapped(_CUDA, alias.target, True), caller)
        return tensor

    def module_to_(module, *args, **kwargs):
        caller = sys._getframe(1)
        args, kwargs, mapped = alias._map_args(args, kwargs, caller)
        if mapped is not None:
            alias._note("Module.to", mapped, caller)
        return module_to(module, *args, **kwargs)

    def module_cuda(module, device=None):
        caller = sys._getframe(1)
        if alias._bypass(caller):
            return module_cuda_(module, device)
        target = alias._map_any(device if device is not None else _CUDA)
        alias._note("Module.cuda", _Mapped(device if device is not None else _CUDA, target, True), caller)
        return module_to(module, target)

    alias._wrappers.update((to, tensor_cuda, tensor_pin_memory))
    for owner, name, replacement, original in (
            (torch.Tensor, "to", to, tensor_to), (torch.Tensor, "cuda", tensor_cuda, tensor_cuda_),
            (torch.Tensor, "pin_memory", tensor_pin_memory, pin_memory),
            (torch.nn.Module, "to", module_to_, module_to), (torch.nn.Module, "cuda", module_cuda, module_cuda_)):
        functools.update_wrapper(replacement, original)
        alias._patch(owner, name, replacement)

    set_default_device = torch.set_default_device

    @functools.wraps(set_default_device)
    def set_default_device_(device):
        caller = sys._getframe(1)
        if (_is_cuda(device) or _is_ordinal(device)) and not alias._bypass(caller):
            mapped = _Mapped(device, alias.map_device(device), True)
            alias._note("torch.set_default_device", mapped, caller)
            device = alias.map_device(device)
        return set_default_device(device)

    alias._patch(torch, "set_default_device", set_default_device_)


# torch.cuda ---------------------------------------------------------------------------------------
class _CudaAPI:
    """torch.cuda calls -> torch.fl, with torch.cuda's signatures. A method whose first parameter is
    `device` takes a CUDA device (mapped); the others act on the target."""

    def __init__(self, alias: CudaAlias):
        from .. import runtime

        self.alias, self.fl = alias, runtime

    def _dev(self, device: Any) -> torch.device:
        return self.alias._map_any(device)

    def is_available(self) -> bool:
        return self.fl.is_available(self.alias.target)

    def device_count(self) -> int:
        return self.fl.device_count(self.alias.target)

    def current_device(self) -> int:
        return self.fl.current_device(self.alias.target)

    def set_device(self, device: Any) -> None:
        self.fl.set_device(self._dev(device))

    def synchronize(self, device: Any = None) -> None:
        self.fl.synchronize(self._dev(device))

    def get_device_name(self, device: Any = None) -> str:
        return self.fl.get_device_properties(self._dev(device)).name

    def get_device_properties(self, device: Any = None) -> Any:
        return self.fl.get_device_properties(self._dev(device))

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return "bfloat16" in description_for(self.alias.target).dtypes

    def memory_allocated(self, device: Any = None) -> int:
        return self.fl.memory_allocated(self._dev(device))

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.fl.max_memory_allocated(self._dev(device))

    # The facade has no reserved-pool figure: reserved is reported as allocated.
    memory_reserved = memory_allocated
    max_memory_reserved = max_memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.fl.reset_peak_memory_stats(self._dev(device))

    reset_max_memory_allocated = reset_peak_memory_stats

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return self.fl.mem_get_info(self._dev(device))

    def empty_cache(self) -> None:
        self.fl.empty_cache(self.alias.target)

    def manual_seed(self, seed: int) -> None:
        self.fl.manual_seed(seed, self.alias.target)

    manual_seed_all = manual_seed

    def stream(self, stream: Any) -> Any:
        return self.fl.stream(stream)

    def current_stream(self, device: Any = None) -> Any:
        dev = self._dev(device)
        accelerator = getattr(torch, "accelerator", None)
        if not description_for(dev).section("streams")["streams"] or accelerator is None:
            return self.fl.Stream(dev)  # one queue: a host stream stands for it
        return accelerator.current_stream(dev)

    default_stream = current_stream

    def Stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> Any:
        return self.fl.Stream(self._dev(device), priority)

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
              **kwargs: Any) -> Any:
        return self.fl.Event(enable_timing, blocking, interprocess, device=self.alias.target)


def _takes_device(handler: Callable[..., Any] | None) -> bool:
    if handler is None:
        return False
    params = list(inspect.signature(handler).parameters)  # bound: no self
    return bool(params) and params[0] == "device"


def _requested(takes_device: bool, args: tuple, kwargs: dict) -> Any:
    if not takes_device:
        return None
    return args[0] if args else kwargs.get("device")


def _cuda_function(alias: CudaAlias, api: _CudaAPI, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    handler = getattr(api, name, None)
    takes_device = _takes_device(handler)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if not _live(alias, caller):
            return original(*args, **kwargs)
        requested = _requested(takes_device, args, kwargs)
        if handler is None:
            alias._note(f"torch.cuda.{name}", _Mapped(requested or _CUDA, "not aliased", True), caller)
            return original(*args, **kwargs)
        resolved = alias._map_any(requested) if requested is not None else alias.target
        alias._note(f"torch.cuda.{name}", _Mapped(requested or _CUDA, resolved, True), caller)
        return handler(*args, **kwargs)

    return wrapper


class _ClassAliasMeta(type):
    """isinstance() against the aliased class asks the class it stands for."""

    _stands_for: Any

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._stands_for)


def _cuda_class(alias: CudaAlias, api: _CudaAPI, name: str, original: type) -> type:
    handler = getattr(api, name)
    takes_device = _takes_device(handler)

    def __new__(cls, *args, **kwargs):
        caller = sys._getframe(1)
        if not _live(alias, caller):
            return original(*args, **kwargs)
        requested = _requested(takes_device, args, kwargs)
        alias._note(f"torch.cuda.{name}", _Mapped(requested or _CUDA, alias._map_any(requested), True), caller)
        return handler(*args, **kwargs)

    stands_for = getattr(api.fl, name)
    return _ClassAliasMeta(name, (), {"__new__": __new__, "_stands_for": stands_for,
                                      "__doc__": f"torch.cuda.{name} -> torch.fl.{name} (CUDA alias)",
                                      "__module__": original.__module__})


def _public_functions(module: ModuleType) -> list[str]:
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(value)
            and (value.__module__ or "").startswith(module.__name__)]


def _install_cuda_module(alias: CudaAlias) -> None:
    api = _CudaAPI(alias)
    for name in _public_functions(torch.cuda):
        alias._patch(torch.cuda, name, _cuda_function(alias, api, name, getattr(torch.cuda, name)))
    for name in ("Stream", "Event"):
        alias._patch(torch.cuda, name, _cuda_class(alias, api, name, getattr(torch.cuda, name)))


# Autocast and GradScaler ---------------------------------------------------------------------------
def _autocast_args(alias: CudaAlias, call: str, device_type: Any, dtype: torch.dtype | None,
                   caller: FrameType | None) -> tuple[Any, torch.dtype | None]:
    if device_type != _CUDA or alias._bypass(caller):
        if alias._recorder is not None:
            alias._note(call, _Mapped(device_type, device_type, False), caller)
        return device_type, dtype
    desc = description_for(alias.target)
    chosen = dtype
    if dtype is None or str(dtype).removeprefix("torch.") not in desc.dtypes:
        chosen = getattr(torch, desc.autocast_dtype)
        if dtype is not None:
            _log.info("autocast: %s does not support %s; using its autocast dtype %s", desc.name, dtype, chosen)
    alias._note(call, _Mapped(_CUDA, f"{alias.target.type} ({str(chosen).removeprefix('torch.')})", True), caller)
    return alias.target.type, chosen


def _install_amp(alias: CudaAlias) -> None:
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
            device_type, dtype = _autocast_args(alias, "torch.cuda.amp.autocast", _CUDA, dtype, sys._getframe(1))
            super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    def scaler_device(call: str, device: str, caller: FrameType | None) -> str:
        if device != _CUDA or alias._bypass(caller):
            return device
        alias._note(call, _Mapped(_CUDA, alias.target.type, True), caller)
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
            device = scaler_device("torch.cuda.amp.GradScaler", _CUDA, sys._getframe(1))
            super().__init__(device, init_scale, growth_factor, backoff_factor, growth_interval, enabled)

    autocast.__name__ = autocast.__qualname__ = "autocast"
    cuda_autocast.__name__ = cuda_autocast.__qualname__ = "autocast"
    CudaGradScaler.__name__ = CudaGradScaler.__qualname__ = "GradScaler"
    alias._patch(torch, "autocast", autocast)
    alias._patch(torch.amp, "autocast", autocast)
    alias._patch(torch.amp, "GradScaler", GradScaler)
    if "GradScaler" in vars(torch):
        alias._patch(torch, "GradScaler", GradScaler)
    cuda_amp = getattr(torch.cuda, "amp", None)  # deprecated since torch 2.4
    if cuda_amp is not None:
        alias._patch(cuda_amp, "autocast", cuda_autocast)
        alias._patch(cuda_amp, "GradScaler", CudaGradScaler)


# torch.distributed ----------------------------------------------------------------------------------
def _backend_for(alias: CudaAlias, backend: str) -> str:
    from ..runtime import dist_backend

    chosen = dist_backend(alias.target)
    if ":" not in backend:
        return chosen
    # 'cpu:gloo,cuda:nccl': the CUDA entry becomes the target's, other device types keep theirs.
    pairs = dict(item.split(":", 1) for item in backend.split(","))
    pairs.pop(_CUDA, None)
    pairs.setdefault(alias.target.type, chosen)
    return ",".join(f"{k}:{v}" for k, v in pairs.items())


def _install_distributed(alias: CudaAlias) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return

    def with_backend(original: Callable[..., Any], call: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            backend = args[0] if args else kwargs.get("backend")
            caller = sys._getframe(1)
            bypass = alias._bypass(caller)
            if isinstance(backend, str) and "nccl" in backend.lower() and not bypass:
                chosen = _backend_for(alias, backend)
                alias._note(call, _Mapped(backend, chosen, True), caller)
                args, kwargs = ((chosen, *args[1:]), kwargs) if args else (args, {**kwargs, "backend": chosen})
            device_id = kwargs.get("device_id")
            if device_id is not None and (_is_cuda(device_id) or _is_ordinal(device_id)) and not bypass:
                mapped = alias.map_device(device_id)
                alias._note(call, _Mapped(device_id, mapped, True), caller)
                # device_id binds the process to one accelerator; the host has none to bind.
                kwargs = {**kwargs, "device_id": mapped if mapped.index is not None else None}
            return original(*args, **kwargs)

        return wrapper

    for name in ("init_process_group", "new_group"):
        alias._patch(dist, name, with_backend(getattr(dist, name), f"torch.distributed.{name}"))

    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__

    @functools.wraps(ddp_init)
    def ddp_init_(self, module, device_ids=None, output_device=None, *args, **kwargs):
        caller = sys._getframe(1)
        if device_ids is not None and not alias._bypass(caller):
            mapped = [alias._map_any(d) for d in device_ids]
            alias._note("DistributedDataParallel", _Mapped(f"device_ids={list(device_ids)}",
                                                           [str(d) for d in mapped], True), caller)
            if all(d.index is None for d in mapped):
                device_ids, output_device = None, None  # DDP takes no device ids for host modules
            else:
                device_ids = mapped
                output_device = alias._map_any(output_device) if output_device is not None else None
        ddp_init(self, module, device_ids, output_device, *args, **kwargs)

    alias._patch(ddp, "__init__", ddp_init_)


# torch.load ----------------------------------------------------------------------------------------
def _install_loading(alias: CudaAlias) -> None:
    load = torch.load
    from torch.serialization import default_restore_location

    @functools.wraps(load)
    def load_(f, map_location=None, *args, **kwargs):
        caller = sys._getframe(1)
        if alias._bypass(caller) or (isinstance(map_location, (str, torch.device)) and not _is_cuda(map_location)):
            return load(f, map_location, *args, **kwargs)
        if _is_cuda(map_location) or _is_ordinal(map_location):
            mapped = alias.map_device(map_location)
            alias._note("torch.load", _Mapped(f"map_location={map_location}", mapped, True), caller)
            return load(f, mapped, *args, **kwargs)
        return load(f, _restore_cuda_storages(alias, map_location, caller, default_restore_location),
                    *args, **kwargs)

    alias._patch(torch, "load", load_)


def _restore_cuda_storages(alias: CudaAlias, map_location: Any, caller: FrameType | None,
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
        if _is_cuda(location):
            mapped = alias.map_device(location)
            if not noted:
                noted = True
                alias._note("torch.load", _Mapped(f"storage on {location}", mapped, True), caller)
            location = str(mapped)
        return default_restore_location(storage, location)

    return restore


# Module API ----------------------------------------------------------------------------------------


def install_all(alias: CudaAlias) -> None:
    _install_tensor_and_module(alias)
    _install_cuda_module(alias)
    _install_amp(alias)
    _install_distributed(alias)
    _install_loading(alias)
