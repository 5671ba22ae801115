"""The Python entry points the CUDA alias patches (see alias.py for the mechanism): Tensor and Module
methods, the ``torch.cuda`` module, AMP, torch.distributed and checkpoint loading. Each ``_install_*``
records its patches on the alias, which restores them exactly on ``disable()``."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import torch

from ..device import description_for
from ..errors import TorchFLError
from .alias import (
    _CUDA,
    CudaAlias,
    _caller,
    _has_cuda,
    _is_cuda,
    _is_internal,
    _is_ordinal,
    _live,
    _log,
    _Mapped,
)
from .cuda_api import CUDA_API, CUDA_TENSOR_TYPES, DEFAULT_REMEDY, lookup


# Tensor and Module --------------------------------------------------------------------------------
def _install_tensor_and_module(alias: CudaAlias) -> None:
    tensor_to, module_to, pin_memory = torch.Tensor.to, torch.nn.Module.to, torch.Tensor.pin_memory

    tensor_cuda_, module_cuda_ = torch.Tensor.cuda, torch.nn.Module.cuda

    def to(tensor, *args, **kwargs):
        if alias._recorder is None and not _has_cuda(args, kwargs, True):
            return tensor_to(tensor, *args, **kwargs)
        caller = _caller(sys._getframe(1))
        args, kwargs, mapped = alias._map_args(args, kwargs, caller, ordinal_first=True)
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
        args, kwargs, mapped = alias._map_args(args, kwargs, caller, ordinal_first=True)
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

    # Storages: `torch.load(f, map_location=lambda s, loc: s.cuda())` moves each storage itself.
    for owner in (torch.storage._StorageBase, torch.storage.TypedStorage):
        alias._patch(owner, "cuda", _storage_cuda(alias, owner.cuda))


def _storage_cuda(alias: CudaAlias, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def cuda(storage, device=None, non_blocking=False):
        caller = sys._getframe(1)
        if alias._bypass(caller):
            return original(storage, device, non_blocking)
        target = alias._map_any(device if device is not None else _CUDA)
        alias._note("Storage.cuda", _Mapped(device if device is not None else _CUDA, target, True), caller)
        # As torch.load restores a storage saved there: through the deserializers registered per device
        # type (an emulated device has no storage.to of its own; a vendor plugin registers its own).
        from torch.serialization import default_restore_location

        return default_restore_location(storage, str(target))

    return cuda


# torch.cuda ---------------------------------------------------------------------------------------
# What torch.cuda.get_device_capability() answers off CUDA. Code branches on it to pick CUDA-only fast
# paths (>= (8, 0): bf16 and TF32 kernels, flash attention; >= (9, 0): FP8); (7, 0) passes the usual
# "GPU too old" checks and takes none of those paths.
CONSERVATIVE_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class CudaDeviceProperties:
    """torch.cuda.get_device_properties() under the alias: torch.fl's properties of the target, plus the
    CUDA fields code reads (`major`/`minor` are CONSERVATIVE_CAPABILITY)."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int
    type: str
    index: int
    vendor: str
    description: str
    is_integrated: bool = False
    is_multi_gpu_board: bool = False


class _CudaAPI:
    """Handlers of torch.cuda calls under the alias, named by the table's `alias` field (cuda_api.py);
    torch.cuda's signatures. Handlers of entries with `takes_device` take a CUDA device (mapped); the
    others act on the target. The first docstring line is what docs/migrate-runtime.md says."""

    def __init__(self, alias: CudaAlias):
        from .. import runtime

        self.alias, self.fl = alias, runtime

    def _dev(self, device: Any) -> torch.device:
        return self.alias._map_any(device)

    def _answer(self, call: str, answer: Any) -> Any:
        self.alias.answered(call, answer)
        return answer

    def is_available(self) -> bool:
        """`torch.fl.is_available()` of the target: True where the target exists (the host included)."""
        return self.fl.is_available(self.alias.target)

    def device_count(self) -> int:
        """`torch.fl.device_count()` of the target's type."""
        return self.fl.device_count(self.alias.target)

    def current_device(self) -> int:
        """`torch.fl.current_device()` of the target's type."""
        return self.fl.current_device(self.alias.target)

    def set_device(self, device: Any) -> None:
        """`torch.fl.set_device()` of the mapped device."""
        self.fl.set_device(self._dev(device))

    def synchronize(self, device: Any = None) -> None:
        """`torch.fl.synchronize()` of the mapped device."""
        self.fl.synchronize(self._dev(device))

    def is_initialized(self) -> bool:
        """True: torch.fl initialises the target on first use."""
        return True

    def init(self) -> None:
        """Resolves the target (nothing else to initialise)."""
        self.alias.target  # noqa: B018 -- resolving is the initialisation

    def device(self, device: Any) -> Any:
        """A context that makes the mapped device current (`torch.fl.set_device`) and restores it."""
        return _DeviceContext(self, device)

    def device_of(self, obj: Any) -> Any:
        """The `device` context of a tensor's device; a no-op for a tensor off the target's type."""
        dev = getattr(obj, "device", None)
        same = isinstance(dev, torch.device) and dev.type == self.alias.target.type
        return _DeviceContext(self, dev if same else None)

    def get_device_name(self, device: Any = None) -> str:
        """`torch.fl.get_device_properties(...).name`; listed in the alias report."""
        return self._answer("torch.cuda.get_device_name", self.fl.get_device_properties(self._dev(device)).name)

    def get_device_properties(self, device: Any = None) -> CudaDeviceProperties:
        """`torch.fl.get_device_properties()` (name, total memory, compute units) with the conservative
        capability as `major`/`minor`; listed in the alias report."""
        props = self.fl.get_device_properties(self._dev(device))
        major, minor = CONSERVATIVE_CAPABILITY
        answer = CudaDeviceProperties(props.name, props.total_memory, props.multi_processor_count, major, minor,
                                      props.type, props.index, props.vendor, props.description)
        self.alias.answered("torch.cuda.get_device_properties",
                            f"name={answer.name!r}, total_memory={answer.total_memory}, "
                            f"multi_processor_count={answer.multi_processor_count}, major={major}, minor={minor}")
        return answer

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        """The conservative capability (7, 0): `capability >= (8, 0)` branches take their safe path;
        listed in the alias report."""
        self._dev(device)  # an ordinal out of range is still an error
        return self._answer("torch.cuda.get_device_capability", CONSERVATIVE_CAPABILITY)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """Whether `bfloat16` is in the target description's `precision.dtypes`; listed in the alias report."""
        return self._answer("torch.cuda.is_bf16_supported", "bfloat16" in description_for(self.alias.target).dtypes)

    def memory_allocated(self, device: Any = None) -> int:
        """`torch.fl.memory_allocated()` (reserved: the facade has no reserved-pool figure)."""
        return self.fl.memory_allocated(self._dev(device))

    def max_memory_allocated(self, device: Any = None) -> int:
        """`torch.fl.max_memory_allocated()` (reserved: the facade has no reserved-pool figure)."""
        return self.fl.max_memory_allocated(self._dev(device))

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """`torch.fl.reset_peak_memory_stats()`."""
        self.fl.reset_peak_memory_stats(self._dev(device))

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """`torch.fl.mem_get_info()` (free, total)."""
        return self.fl.mem_get_info(self._dev(device))

    def empty_cache(self) -> None:
        """`torch.fl.empty_cache()`."""
        self.fl.empty_cache(self.alias.target)

    def manual_seed(self, seed: int) -> None:
        """`torch.fl.manual_seed()` (seeds every device's generator)."""
        self.fl.manual_seed(seed, self.alias.target)

    def _generator(self, device: Any = None) -> torch.Generator:
        dev = self._dev(device)
        if dev.type == "cpu":
            return torch.default_generator
        generators = getattr(getattr(torch, dev.type, None), "default_generators", None)
        if not generators:
            raise CudaAliasError(f"the CUDA alias finds no default generator for {dev} (torch.{dev.type}."
                                 f"default_generators): seed with torch.fl.manual_seed(seed) instead")
        return generators[dev.index if dev.index is not None else self.fl.current_device(dev)]

    def _generators(self) -> list[torch.Generator]:
        target = self.alias.target
        if target.index is None:
            return [self._generator()]
        from .. import devices

        return [self._generator(d) for d in devices() if d.type == target.type]

    def get_rng_state(self, device: Any = "cuda") -> torch.Tensor:
        """The state of the mapped device's default generator (the host's: `torch.get_rng_state()`)."""
        return self._generator(device).get_state()

    def set_rng_state(self, new_state: torch.Tensor, device: Any = "cuda") -> None:
        """Sets the state of the mapped device's default generator."""
        self._generator(device).set_state(new_state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        """The states of the default generators of the target's devices (one for the host)."""
        return [g.get_state() for g in self._generators()]

    def set_rng_state_all(self, new_states: Any) -> None:
        """Sets the states of the default generators of the target's devices, in order."""
        for generator, state in zip(self._generators(), new_states, strict=False):
            generator.set_state(state)

    def seed(self) -> None:
        """Seeds the target's default generator with a non-deterministic number."""
        self._generator().seed()

    def seed_all(self) -> None:
        """Seeds the default generators of the target's devices with non-deterministic numbers."""
        for generator in self._generators():
            generator.seed()

    def initial_seed(self) -> int:
        """The initial seed of the target's default generator."""
        return self._generator().initial_seed()

    def stream(self, stream: Any) -> Any:
        """`torch.fl.stream()`."""
        return self.fl.stream(stream)

    def current_stream(self, device: Any = None) -> Any:
        """The target's current stream (a host `torch.fl.Stream` where the description has no streams)."""
        dev = self._dev(device)
        accelerator = getattr(torch, "accelerator", None)
        if not description_for(dev).section("streams")["streams"] or accelerator is None:
            return self.fl.Stream(dev)  # one queue: a host stream stands for it
        return accelerator.current_stream(dev)

    def is_current_stream_capturing(self) -> bool:
        """False: no CUDA graph captures off CUDA."""
        return False

    def Stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> Any:
        """`torch.fl.Stream` on the mapped device."""
        return self.fl.Stream(self._dev(device), priority)

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
              **kwargs: Any) -> Any:
        """`torch.fl.Event` on the target."""
        return self.fl.Event(enable_timing, blocking, interprocess, device=self.alias.target)

    def nvtx(self) -> ModuleType:
        """`range_push`/`range_pop`/`range`/`mark`: `torch.profiler.record_function` ranges (profiler
        traces keep the names)."""
        return torch.cuda.nvtx


def _typed_tensor(dtype_name: str) -> Callable[..., Any]:
    def handler(self: _CudaAPI, *args: Any, **kwargs: Any) -> torch.Tensor:
        dtype, target = getattr(torch, dtype_name), self.alias.target
        if not args:
            return torch.empty(0, dtype=dtype, device=target)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            return args[0].to(target, dtype)
        if all(type(a) is int for a in args) or (len(args) == 1 and isinstance(args[0], torch.Size)):
            return torch.empty(*args, dtype=dtype, device=target)
        return torch.tensor(args[0], dtype=dtype, device=target)

    handler.__doc__ = f"A `torch.{dtype_name}` tensor on the target (a size: uninitialised; data: a copy)."
    return handler


for _name, _dtype in CUDA_TENSOR_TYPES.items():
    setattr(_CudaAPI, _name, _typed_tensor(_dtype))
# Each torch.cuda name answers with its table entry's handler (memory_reserved -> memory_allocated).
for _entry in CUDA_API.values():
    if _entry.alias and hasattr(_CudaAPI, _entry.alias) and "." not in _entry.short:
        setattr(_CudaAPI, _entry.short, getattr(_CudaAPI, _entry.alias))
del _name, _dtype, _entry


class _DeviceContext:
    """torch.cuda.device(d) under the alias: the mapped device is current inside the block. None and -1
    mean "no device" (as torch.cuda.device) and make the block a no-op."""

    def __init__(self, api: _CudaAPI, device: Any):
        self.api = api
        none = device is None or (_is_ordinal(device) and device == -1)
        self.device = None if none else api._dev(device)
        self.previous: int | None = None

    def __enter__(self) -> _DeviceContext:
        if self.device is not None:
            self.previous = self.api.fl.current_device(self.device)
            self.api.fl.set_device(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device is not None and self.previous is not None:
            self.api.fl.set_device(torch.device(self.device.type, self.previous)
                                   if self.device.index is not None else self.device)


class CudaAliasError(TorchFLError, RuntimeError):
    """A torch.cuda call the CUDA alias does not cover (or refuses) failed; the message names the alias
    and the remedy of the CUDA-API table."""


def _alias_error(entry_name: str, remedy: str, alias: CudaAlias, why: str) -> CudaAliasError:
    return CudaAliasError(
        f"{entry_name} {why} under the CUDA alias (FL_CUDA_ALIAS=1 / `torchfl run`, target "
        f"{alias.target}). Fix: {remedy.rstrip('.')}; or run on CUDA without the alias.")


def _cuda_function(alias: CudaAlias, api: _CudaAPI, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    entry = lookup(f"torch.cuda.{name}")
    handler = getattr(api, entry.alias) if entry is not None and entry.alias else None
    takes_device = entry is not None and entry.takes_device
    remedy = entry.remedy if entry is not None else DEFAULT_REMEDY

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if not _live(alias, caller):
            return original(*args, **kwargs)
        call = f"torch.cuda.{name}"
        requested = _requested(takes_device, args, kwargs)
        if entry is not None and entry.alias_refuses:
            alias._note(call, _Mapped(requested or _CUDA, "refused", True), caller)
            raise _alias_error(call, remedy, alias, "would be wrong off CUDA, so it does not run")
        if handler is None:
            alias._note(call, _Mapped(requested or _CUDA, "not aliased", True), caller)
            try:
                return original(*args, **kwargs)
            except Exception as exc:
                raise _alias_error(call, remedy, alias, f"has no torch.fl counterpart; run as is, it failed "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
        resolved = alias._map_any(requested) if requested is not None else alias.target
        alias._note(call, _Mapped(requested or _CUDA, resolved, True), caller)
        return handler(*args, **kwargs)

    return wrapper


def _requested(takes_device: bool, args: tuple, kwargs: dict) -> Any:
    if not takes_device:
        return None
    requested = args[0] if args else kwargs.get("device")
    return None if _is_ordinal(requested) and requested == -1 else requested  # -1: "no device" (torch.cuda.device)


class _ClassAliasMeta(type):
    """isinstance() against the aliased class asks `_instancecheck` (default: the class it stands for)."""

    _stands_for: Any

    def __instancecheck__(cls, obj: Any) -> bool:
        check = cls.__dict__.get("_instancecheck")
        return check(obj) if check is not None else isinstance(obj, cls._stands_for)


def _cuda_class(alias: CudaAlias, api: _CudaAPI, name: str, original: type) -> type:
    entry = lookup(f"torch.cuda.{name}")
    handler = getattr(api, entry.alias) if entry is not None and entry.alias else None
    takes_device = entry is not None and entry.takes_device
    remedy = entry.remedy if entry is not None else DEFAULT_REMEDY
    call = f"torch.cuda.{name}"

    def __new__(cls, *args, **kwargs):
        caller = sys._getframe(1)
        if not _live(alias, caller):
            return original(*args, **kwargs)
        if entry is not None and entry.alias_refuses:
            alias._note(call, _Mapped(_CUDA, "refused", True), caller)
            raise _alias_error(call, remedy, alias, "would be wrong off CUDA, so it does not run")
        requested = _requested(takes_device, args, kwargs)
        if handler is None:
            alias._note(call, _Mapped(requested or _CUDA, "not aliased", True), caller)
            try:
                return original(*args, **kwargs)
            except Exception as exc:
                raise _alias_error(call, remedy, alias, f"has no torch.fl counterpart; run as is, it failed "
                                   f"({type(exc).__name__})") from exc
        alias._note(call, _Mapped(requested or _CUDA, alias._map_any(requested), True), caller)
        return handler(*args, **kwargs)

    namespace: dict[str, Any] = {"__new__": __new__, "_stands_for": getattr(api.fl, name, original),
                                 "__doc__": f"{call} under the CUDA alias", "__module__": original.__module__}
    if name in CUDA_TENSOR_TYPES:
        dtype = getattr(torch, CUDA_TENSOR_TYPES[name])
        namespace["_instancecheck"] = staticmethod(
            lambda obj: isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.device.type == alias.target.type)
    elif name in ("device", "device_of"):
        namespace["_instancecheck"] = staticmethod(lambda obj: isinstance(obj, (_DeviceContext, original)))
    return _ClassAliasMeta(name, (), namespace)


def _public_functions(module: ModuleType) -> list[str]:
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(value)
            and (value.__module__ or "").startswith(module.__name__)]


def _install_nvtx(alias: CudaAlias) -> None:
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is None:
        return
    from torch.autograd.profiler import record_function

    opened: list[Any] = []

    def range_push(msg: str) -> int:
        opened.append(record_function(msg).__enter__())
        return len(opened) - 1

    def range_pop() -> int:
        if opened:
            opened.pop().__exit__(None, None, None)
        return len(opened)

    def mark(msg: str) -> None:
        return None

    for name, replacement in (("range_push", range_push), ("range_pop", range_pop), ("mark", mark),
                              ("range", lambda msg, *args, **kwargs: record_function(msg.format(*args, **kwargs)))):
        if hasattr(nvtx, name):
            alias._patch(nvtx, name, replacement)


# torch.cuda's submodules whose public functions torch.cuda re-exports.
_CUDA_SUBMODULES = ("memory", "random", "streams", "graphs")


def _wrapped(entry: Any) -> bool:
    """Whether the alias puts a wrapper on this table entry (a name directly in torch.cuda that is called)."""
    return entry.name.startswith("torch.cuda.") and "." not in entry.short and entry.kind in ("function", "class",
                                                                                               "type")


def _install_cuda_module(alias: CudaAlias) -> None:
    """Every public torch.cuda function and every class of the CUDA-API table: a handler (`alias`), a
    refusal (`alias_refuses`) or the original with its failure explained (the rest)."""
    api = _CudaAPI(alias)
    names = set(_public_functions(torch.cuda))
    names.update(entry.short for entry in CUDA_API.values() if _wrapped(entry) and hasattr(torch.cuda, entry.short))
    for name in sorted(names):
        original = getattr(torch.cuda, name)
        wrap = _cuda_class if isinstance(original, type) else _cuda_function
        replacement = wrap(alias, api, name, original)
        alias._patch(torch.cuda, name, replacement)
        # The submodule that defines it (torch.cuda.random.get_rng_state_all, as HF Trainer calls it).
        for submodule in _CUDA_SUBMODULES:
            module = sys.modules.get(f"torch.cuda.{submodule}")
            if module is not None and vars(module).get(name) is original:
                alias._patch(module, name, replacement)
    _install_nvtx(alias)
    _install_accelerator(alias, api)


# torch.accelerator ---------------------------------------------------------------------------------
# torch.accelerator names -> the _CudaAPI handler answering for the target. Accelerator-generic code
# (torch >= 2.6) asks torch.accelerator what torch.cuda-era code asked torch.cuda: with the alias on, the
# target is "the accelerator" for both, so such code takes its accelerator path on the target too.
_ACCELERATOR = {
    "is_available": "is_available", "device_count": "device_count", "synchronize": "synchronize",
    "current_device_index": "current_device", "current_device_idx": "current_device",
    "set_device_index": "set_device", "set_device_idx": "set_device", "device_index": "device",
    "current_stream": "current_stream", "empty_cache": "empty_cache", "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated", "reset_peak_memory_stats": "reset_peak_memory_stats",
    "get_memory_info": "mem_get_info", "get_device_capability": "get_device_capability",
}


def _install_accelerator(alias: CudaAlias, api: _CudaAPI) -> None:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return
    current = getattr(accelerator, "current_accelerator", None)
    if current is not None:
        @functools.wraps(current)
        def current_accelerator(*args, **kwargs):
            caller = sys._getframe(1)
            if not _live(alias, caller):
                return current(*args, **kwargs)
            alias._note("torch.accelerator.current_accelerator", _Mapped(_CUDA, alias.target, True), caller)
            return torch.device(alias.target.type)

        alias._patch(accelerator, "current_accelerator", current_accelerator)
    for name, handler_name in _ACCELERATOR.items():
        original = getattr(accelerator, name, None)
        if original is not None:
            alias._patch(accelerator, name, _accelerator_function(alias, getattr(api, handler_name), name, original))


def _accelerator_function(alias: CudaAlias, handler: Callable[..., Any], name: str,
                          original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if not _live(alias, caller):
            return original(*args, **kwargs)
        alias._note(f"torch.accelerator.{name}", _Mapped(_CUDA, alias.target, True), caller)
        return handler(*args, **kwargs)

    return wrapper


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


def _install_legacy_types(alias: CudaAlias) -> None:
    tensor_type, record_stream = torch.Tensor.type, torch.Tensor.record_stream
    set_default_tensor_type = torch.set_default_tensor_type

    @functools.wraps(tensor_type)
    def type_(tensor, dtype=None, non_blocking=False, **kwargs):
        caller = sys._getframe(1)
        wanted = _cuda_type_dtype(dtype) if dtype is not None else None
        if wanted is None or alias._bypass(caller):
            return tensor_type(tensor, dtype, non_blocking, **kwargs) if dtype is not None else tensor_type(tensor)
        alias._note("Tensor.type", _Mapped(dtype if isinstance(dtype, str) else f"torch.cuda.{dtype.__name__}",
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
        if wanted is None or alias._bypass(caller):
            if set_device[0]:  # a host type after a CUDA one: tensors are made on the host again, as in torch
                torch.set_default_device(None)
                set_device[0] = False
            return set_default_tensor_type(t)
        set_device[0] = True
        alias._note("torch.set_default_tensor_type", _Mapped(t if isinstance(t, str) else f"torch.cuda.{t.__name__}",
                                                             alias.target, True), caller)
        torch.set_default_dtype(wanted)
        torch.set_default_device(alias.target)
        return None

    alias._wrappers.update((type_, record_stream_))
    alias._patch(torch.Tensor, "type", type_)
    alias._patch(torch.Tensor, "record_stream", record_stream_)
    alias._patch(torch, "set_default_tensor_type", set_default_tensor_type_)


# torch.Generator and torch.backends.cuda flags ----------------------------------------------------
def _install_generator(alias: CudaAlias) -> None:
    original = torch.Generator

    def __new__(cls, device: Any = "cpu"):
        caller = sys._getframe(1)
        if (_is_cuda(device) or _is_ordinal(device)) and not alias._bypass(caller):
            mapped = alias.map_device(device)
            alias._note("torch.Generator", _Mapped(device, mapped, True), caller)
            device = mapped
        return original(device=device)

    alias._patch(torch, "Generator", _ClassAliasMeta(
        "Generator", (), {"__new__": __new__, "_stands_for": original, "__doc__": original.__doc__,
                          "__module__": "torch"}))


def _install_backend_flags(alias: CudaAlias) -> None:
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
            alias._patch(cls, "__setattr__", recording_setattr(owner_name, cls.__setattr__))
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_math_sdp", "enable_cudnn_sdp",
                 "preferred_linalg_library", "preferred_blas_library"):
        original = getattr(torch.backends.cuda, name, None)
        if original is not None:
            alias._patch(torch.backends.cuda, name, _recorded_flag(alias, name, original))


def _recorded_flag(alias: CudaAlias, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def flag(*args, **kwargs):
        caller = sys._getframe(1)
        if args and not alias.real_cuda and not _is_internal(caller.f_code.co_filename):
            alias.answered(f"torch.backends.cuda.{name}({', '.join(map(repr, args))})",
                           "accepted (a CUDA setting)")
        return original(*args, **kwargs)

    return flag


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
    _install_device_mesh(alias)


def _install_device_mesh(alias: CudaAlias) -> None:
    """init_device_mesh("cuda", ...) and DeviceMesh("cuda", ...): a mesh of the target's device type
    (torch builds the mesh's process groups and device handle from that type)."""
    mesh_module = sys.modules.get("torch.distributed.device_mesh")  # imported by torch.distributed itself
    if mesh_module is None or not hasattr(mesh_module, "init_device_mesh"):
        return

    def mapped_type(call: str, device_type: Any, caller: FrameType | None) -> Any:
        if device_type != _CUDA or alias._bypass(caller):
            return device_type
        alias._note(call, _Mapped(_CUDA, alias.target.type, True), caller)
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

    alias._patch(mesh_module, "init_device_mesh", init_device_mesh_)
    alias._patch(mesh_module.DeviceMesh, "__init__", mesh_init_)


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
        if map_location is None or isinstance(map_location, dict):
            # A dict, not a callable: torch refuses callables for tensors rebuilt from a device without
            # storages (an emulated device's checkpoint).
            return load(f, _CudaLocations(alias, map_location or {}, caller), *args, **kwargs)
        return load(f, _restore_cuda_storages(alias, map_location, caller, default_restore_location),
                    *args, **kwargs)

    alias._patch(torch, "load", load_)


class _CudaLocations(dict):
    """A map_location dict (the caller's, if any) that also sends every CUDA location to the alias
    target; torch asks it with `.get(location, location)` for each storage."""

    def __init__(self, alias: CudaAlias, given: dict, caller: FrameType | None):
        super().__init__(given)
        self.alias, self.caller, self.noted = alias, caller, False

    def get(self, location: Any, default: Any = None) -> Any:
        found = super().get(location, default)
        if isinstance(found, torch.device):
            found = str(found)
        if not _is_cuda(found):
            return found
        mapped = self.alias.map_device(found)
        if not self.noted:
            self.noted = True
            self.alias._note("torch.load", _Mapped(f"storage on {found}", mapped, True), self.caller)
        return str(mapped)


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


# The covered surface, for docs/migrate-runtime.md -------------------------------------------------------
# Entries whose alias is a class patch of _install_amp rather than a _CudaAPI handler.
_PATCHED_CLASSES = {
    "autocast": "autocast on the target's type, in the requested dtype when the target's description lists "
                "it, else its `precision.autocast_dtype`",
    "GradScaler": "a `torch.amp.GradScaler` for the target's type",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def surface_markdown() -> str:
    """The table of every torch.cuda entry of the CUDA-API table and what it does under the alias
    (docs/migrate-runtime.md holds exactly this; a test checks it)."""
    rows = ["| CUDA API | kind | under the alias |", "| --- | --- | --- |"]
    for entry in sorted(CUDA_API.values(), key=lambda e: e.name):
        if entry.alias in _PATCHED_CLASSES:
            what = _PATCHED_CLASSES[entry.alias]
        elif entry.alias is not None:
            doc = (getattr(_CudaAPI, entry.alias).__doc__ or "").strip().split("\n\n")[0]
            what = doc
        elif entry.alias_refuses:
            what = f"refused: raises `CudaAliasError` naming the alias and the fix: {entry.remedy}"
        elif not _wrapped(entry):
            what = f"left as is. Instead: {entry.remedy}"
        else:
            what = f"runs as is (logged \"not aliased\"); if it fails, `CudaAliasError` names the alias and: {entry.remedy}"
        rows.append(f"| `{entry.name}` | {entry.kind} | {_cell(what)} |")
    return "\n".join(rows) + "\n"


# Module API ----------------------------------------------------------------------------------------


def install_all(alias: CudaAlias) -> None:
    _install_tensor_and_module(alias)
    _install_cuda_module(alias)
    _install_generator(alias)
    _install_legacy_types(alias)
    _install_backend_flags(alias)
    _install_amp(alias)
    _install_distributed(alias)
    _install_loading(alias)
