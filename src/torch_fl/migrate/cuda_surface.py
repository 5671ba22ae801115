"""The ``torch.cuda`` (and ``torch.accelerator``) surface under the CUDA alias, derived from the CUDA-API
table (cuda_api.py): each entry's ``alias`` names its handler in :class:`CudaAPI`, ``alias_refuses``
marks calls that would be wrong off CUDA, and the rest run as they are, their failures explained by a
:class:`CudaAliasError` naming the alias and the entry's remedy. :func:`surface_markdown` renders the same
table for docs/migrate-runtime.md. patches.py installs the other entry points."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import torch

from ..device import description_for, device_map
from ..errors import CudaAliasError
from .alias_calls import CUDA, AliasHooks, Mapped, is_ordinal, live
from .cuda_api import CUDA_API, CUDA_TENSOR_TYPES, DEFAULT_REMEDY, lookup

__all__ = ["CONSERVATIVE_CAPABILITY", "CudaAPI", "CudaAliasError", "CudaDeviceProperties", "install_cuda_module",
           "surface_markdown"]


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


class CudaAPI:
    """Handlers of torch.cuda calls under the alias, named by the table's `alias` field (cuda_api.py);
    torch.cuda's signatures. Handlers of entries with `takes_device` take a CUDA device (mapped); the
    others act on the target. The first docstring line is what docs/migrate-runtime.md says."""

    def __init__(self, alias: AliasHooks):
        from .. import runtime

        self.alias, self.fl = alias, runtime

    def _dev(self, device: Any) -> torch.device:
        return self.alias.map_any(device)

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
        return [self._generator(d) for d in device_map().values() if d.type == target.type]

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
    def handler(self: CudaAPI, *args: Any, **kwargs: Any) -> torch.Tensor:
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
    setattr(CudaAPI, _name, _typed_tensor(_dtype))
# Each torch.cuda name answers with its table entry's handler (memory_reserved -> memory_allocated).
for _entry in CUDA_API.values():
    if _entry.alias and hasattr(CudaAPI, _entry.alias) and "." not in _entry.short:
        setattr(CudaAPI, _entry.short, getattr(CudaAPI, _entry.alias))
del _name, _dtype, _entry


class _DeviceContext:
    """torch.cuda.device(d) under the alias: the mapped device is current inside the block. None and -1
    mean "no device" (as torch.cuda.device) and make the block a no-op."""

    def __init__(self, api: CudaAPI, device: Any):
        self.api = api
        none = device is None or (is_ordinal(device) and device == -1)
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


def _alias_error(entry_name: str, remedy: str, alias: AliasHooks, why: str) -> CudaAliasError:
    return CudaAliasError(
        f"{entry_name} {why} under the CUDA alias (FL_CUDA_ALIAS=1 / `torchfl run`, target "
        f"{alias.target}). Fix: {remedy.rstrip('.')}; or run on CUDA without the alias.")


@dataclass(frozen=True)
class _Entry:
    """What the CUDA-API table says of one torch.cuda name, as its patched function or class uses it."""

    call: str  # "torch.cuda.NAME"
    refuses: bool  # the table's alias_refuses: wrong off CUDA, never run under the alias
    handler: Callable[..., Any] | None  # the CudaAPI handler answering for the target, or None
    takes_device: bool
    remedy: str

    @classmethod
    def of(cls, api: CudaAPI, name: str) -> _Entry:
        entry = lookup(f"torch.cuda.{name}")
        if entry is None:
            return cls(f"torch.cuda.{name}", False, None, False, DEFAULT_REMEDY)
        return cls(f"torch.cuda.{name}", entry.alias_refuses, getattr(api, entry.alias) if entry.alias else None,
                   entry.takes_device, entry.remedy)

    def requested(self, args: tuple, kwargs: dict) -> Any:
        """The device the call names, or None (-1 is "no device" to torch.cuda.device)."""
        if not self.takes_device:
            return None
        requested = args[0] if args else kwargs.get("device")
        return None if is_ordinal(requested) and requested == -1 else requested

    def run_original(self, alias: AliasHooks, original: Callable[..., Any], requested: Any, caller: FrameType,
                     args: tuple, kwargs: dict, full_error: bool) -> Any:
        """No torch.fl counterpart: run torch's own, and explain its failure by the table's remedy."""
        alias.note(self.call, Mapped(requested or CUDA, "not aliased", True), caller)
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            what = type(exc).__name__
            if full_error:
                what += f": {str(exc).splitlines()[0] if str(exc) else ''}"
            raise _alias_error(self.call, self.remedy, alias, f"has no torch.fl counterpart; run as is, it failed "
                               f"({what})") from exc


def _cuda_function(alias: AliasHooks, api: CudaAPI, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    entry = _Entry.of(api, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if not live(alias, caller):
            return original(*args, **kwargs)
        requested = entry.requested(args, kwargs)
        if entry.refuses:
            alias.note(entry.call, Mapped(requested or CUDA, "refused", True), caller)
            raise _alias_error(entry.call, entry.remedy, alias, "would be wrong off CUDA, so it does not run")
        if entry.handler is None:
            return entry.run_original(alias, original, requested, caller, args, kwargs, full_error=True)
        resolved = alias.map_any(requested) if requested is not None else alias.target
        alias.note(entry.call, Mapped(requested or CUDA, resolved, True), caller)
        return entry.handler(*args, **kwargs)

    return wrapper


class ClassAliasMeta(type):
    """isinstance() against the aliased class asks `_instancecheck` (default: the class it stands for)."""

    _stands_for: Any

    def __instancecheck__(cls, obj: Any) -> bool:
        check = cls.__dict__.get("_instancecheck")
        return check(obj) if check is not None else isinstance(obj, cls._stands_for)


def _cuda_class(alias: AliasHooks, api: CudaAPI, name: str, original: type) -> type:
    entry = _Entry.of(api, name)
    call = entry.call

    def __new__(cls, *args, **kwargs):
        caller = sys._getframe(1)
        if not live(alias, caller):
            return original(*args, **kwargs)
        if entry.refuses:
            alias.note(call, Mapped(CUDA, "refused", True), caller)
            raise _alias_error(call, entry.remedy, alias, "would be wrong off CUDA, so it does not run")
        requested = entry.requested(args, kwargs)
        if entry.handler is None:
            return entry.run_original(alias, original, requested, caller, args, kwargs, full_error=False)
        alias.note(call, Mapped(requested or CUDA, alias.map_any(requested), True), caller)
        return entry.handler(*args, **kwargs)

    namespace: dict[str, Any] = {"__new__": __new__, "_stands_for": getattr(api.fl, name, original),
                                 "__doc__": f"{call} under the CUDA alias", "__module__": original.__module__}
    if name in CUDA_TENSOR_TYPES:
        dtype = getattr(torch, CUDA_TENSOR_TYPES[name])
        namespace["_instancecheck"] = staticmethod(
            lambda obj: isinstance(obj, torch.Tensor) and obj.dtype == dtype and obj.device.type == alias.target.type)
    elif name in ("device", "device_of"):
        namespace["_instancecheck"] = staticmethod(lambda obj: isinstance(obj, (_DeviceContext, original)))
    return ClassAliasMeta(name, (), namespace)


def _public_functions(module: ModuleType) -> list[str]:
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(value)
            and (value.__module__ or "").startswith(module.__name__)]


def _install_nvtx(alias: AliasHooks) -> None:
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
            alias.patch(nvtx, name, replacement)


# torch.cuda's submodules whose public functions torch.cuda re-exports.
_CUDA_SUBMODULES = ("memory", "random", "streams", "graphs")


def _wrapped(entry: Any) -> bool:
    """Whether the alias puts a wrapper on this table entry (a name directly in torch.cuda that is called)."""
    return entry.name.startswith("torch.cuda.") and "." not in entry.short and entry.kind in ("function", "class",
                                                                                               "type")


def install_cuda_module(alias: AliasHooks) -> None:
    """Every public torch.cuda function and every class of the CUDA-API table: a handler (`alias`), a
    refusal (`alias_refuses`) or the original with its failure explained (the rest)."""
    api = CudaAPI(alias)
    names = set(_public_functions(torch.cuda))
    names.update(entry.short for entry in CUDA_API.values() if _wrapped(entry) and hasattr(torch.cuda, entry.short))
    for name in sorted(names):
        original = getattr(torch.cuda, name)
        wrap = _cuda_class if isinstance(original, type) else _cuda_function
        replacement = wrap(alias, api, name, original)
        alias.patch(torch.cuda, name, replacement)
        # The submodule that defines it (torch.cuda.random.get_rng_state_all, as HF Trainer calls it).
        for submodule in _CUDA_SUBMODULES:
            module = sys.modules.get(f"torch.cuda.{submodule}")
            if module is not None and vars(module).get(name) is original:
                alias.patch(module, name, replacement)
    _install_nvtx(alias)
    _install_accelerator(alias, api)


# torch.accelerator ---------------------------------------------------------------------------------
# torch.accelerator names -> the CudaAPI handler answering for the target. Accelerator-generic code
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


def _install_accelerator(alias: AliasHooks, api: CudaAPI) -> None:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return
    current = getattr(accelerator, "current_accelerator", None)
    if current is not None:
        @functools.wraps(current)
        def current_accelerator(*args, **kwargs):
            caller = sys._getframe(1)
            if not live(alias, caller):
                return current(*args, **kwargs)
            alias.note("torch.accelerator.current_accelerator", Mapped(CUDA, alias.target, True), caller)
            return torch.device(alias.target.type)

        alias.patch(accelerator, "current_accelerator", current_accelerator)
    for name, handler_name in _ACCELERATOR.items():
        original = getattr(accelerator, name, None)
        if original is not None:
            alias.patch(accelerator, name, _accelerator_function(alias, getattr(api, handler_name), name, original))


def _accelerator_function(alias: AliasHooks, handler: Callable[..., Any], name: str,
                          original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        caller = sys._getframe(1)
        if not live(alias, caller):
            return original(*args, **kwargs)
        alias.note(f"torch.accelerator.{name}", Mapped(CUDA, alias.target, True), caller)
        return handler(*args, **kwargs)

    return wrapper


# The covered surface, for docs/migrate-runtime.md -------------------------------------------------------
# Entries whose alias is a class patch of _install_amp rather than a CudaAPI handler.
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
            doc = (getattr(CudaAPI, entry.alias).__doc__ or "").strip().split("\n\n")[0]
            what = doc
        elif entry.alias_refuses:
            what = f"refused: raises `CudaAliasError` naming the alias and the fix: {entry.remedy}"
        elif not _wrapped(entry):
            what = f"left as is. Instead: {entry.remedy}"
        else:
            what = f"runs as is (logged \"not aliased\"); if it fails, `CudaAliasError` names the alias and: {entry.remedy}"
        rows.append(f"| `{entry.name}` | {entry.kind} | {_cell(what)} |")
    return "\n".join(rows) + "\n"
