"""The runtime CUDA alias: unmodified CUDA-hard-coded code runs on ``torch.fl.device()``.

    with torch_fl.migrate.cuda_alias():      # or a = cuda_alias(); a.enable(); ...; a.disable()
        runpy.run_path("train.py", run_name="__main__")

``torchfl run train.py`` and ``FL_CUDA_ALIAS=1 python train.py`` (the ``torch.backends`` autoload hook,
see autoload.py) do the same for a whole process. docs/migrate-runtime.md is the user documentation.

What CUDA code asks for, and where it goes ("the target" is ``torch.fl.device()``, or the device given):

- a CUDA device argument -- ``"cuda"``, ``"cuda:N"``, ``torch.device("cuda", N)``, an int ``device=N`` --
  of any torch function (factories, ``Tensor.to``, ``Tensor.new_*``, ...), of ``Tensor.to``,
  ``Module.to``, ``torch.set_default_device`` and ``torch.load(map_location=...)`` (and CUDA storages
  in a checkpoint): ``"cuda"`` is the target, ``"cuda:N"`` is the N-th virtual device ``accN`` (every
  index is the target when the target has no index, as the host CPU);
- ``Tensor.cuda``, ``Module.cuda``: ``.to(target)``; ``Tensor.pin_memory``: a no-op on a host target;
- ``torch.cuda.*`` runtime calls: the ``torch.fl`` facade (table ``_CudaAPI``); ``torch.cuda.Stream``
  and ``Event`` are ``torch.fl.Stream`` / ``Event``;
- ``torch.autocast("cuda")``, ``torch.amp.autocast``, ``torch.cuda.amp.autocast``: autocast on the
  target's type, in the requested dtype when the target's description lists it, else (or when none was
  requested) in the description's autocast dtype; ``torch.amp.GradScaler("cuda")`` and
  ``torch.cuda.amp.GradScaler``: a GradScaler for the target's type;
- ``"nccl"`` given to ``torch.distributed.init_process_group`` / ``new_group``: the description's
  collective backend (``torch.fl.dist_backend()``); ``DistributedDataParallel(device_ids=[N])``: the
  mapped devices, none for a host target (DDP takes no device ids for CPU modules).

Device *objects* stay what the code built: ``torch.device("cuda")`` is still a CUDA device, rewritten
where it is used. The code's string tests (``"cuda" in device``) cannot be aliased, so keeping device
objects CUDA makes every branch take the same (GPU) path. ``torch.cuda.is_available()`` is
``torch.fl.is_available()`` (True for the host) for the same reason: code gated on it must take its GPU
path to run on the target. The price: ``tensor.device == torch.device("cuda")`` and ``tensor.is_cuda``
are False.

Mechanism, and why:

- Device arguments of torch functions: a ``TorchFunctionMode``. Every torch function, method and
  factory (and ``torch.device`` itself) passes through it, including calls captured before the alias
  was enabled (``from torch import zeros``); a call without a CUDA argument costs one Python call and a
  scan of its arguments. Patching each factory instead would miss the ones not listed and the ones
  imported by name. A mode is per thread: it covers the thread that enabled the alias (and autograd).
- Everything else is Python attributes, patched in place and restored exactly (the original objects,
  or the inherited attribute deleted again): ``torch.Tensor.{to,cuda,pin_memory}``,
  ``torch.nn.Module.{to,cuda}`` and the entry points named above. These are process-wide, so
  ``.to("cuda")`` works in every thread. ``torch.device`` cannot be patched (a C type, checked with
  isinstance everywhere) and does not need to be: the mode and the patched entry points rewrite it.
- ``torch.cuda`` stays the real module; its public functions are replaced one by one. A replaced
  function answers for torch.fl only when called from outside torch and torch-fl: torch's own feature
  checks (``torch.cuda.is_available()`` in DataLoader, ``torch.manual_seed`` seeding CUDA) keep
  seeing the truth. Functions without a torch.fl counterpart run as they are (and are logged).
- Requests torch-fl makes itself (directly or through torch) are left alone: its analyses name
  devices on purpose (``FL_CUDA_ALIAS=1 torchfl coverage --device cuda`` must still mean CUDA).

Never active when the target is real CUDA (device type ``cuda``, ROCm included): enabling is then a
no-op, logged once. Each aliased call site is logged once at INFO on ``torch_fl.migrate``
(``FL_LOG=migrate=INFO``) with the file:line of the first frame outside torch and torch-fl.

Thread safety: enable/disable are serialized by a lock and only one alias is active per process.
disable() must run on the thread that called enable() (the mode lives on that thread's mode stack),
after any TorchFunctionMode entered later has exited. Other threads get the process-wide patches but
not the mode: a factory with ``device="cuda"`` in a worker thread is not rewritten.

Not covered: ``torch.Generator(device="cuda")``, legacy ``torch.cuda.FloatTensor`` types,
``Tensor.type("torch.cuda...")``, ``torch.cuda.device(...)`` contexts, CUDA graphs, NVTX, custom CUDA
extensions and libraries built for CUDA only. torch.compile of aliased code works; its graphs break at
the patched Python entry points (``.to``, ``.cuda()``, ...), which Dynamo warns about.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack, resolve_name

from ..device import description_for, resolve
from ..errors import DeviceNotFoundError

__all__ = ["CudaAlias", "DeviceRequest", "Site", "active", "cuda_alias"]

_log = logging.getLogger("torch_fl.migrate")

_CUDA = "cuda"
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MODE_MACHINERY = (os.path.join(_TORCH_DIR, "overrides.py"),)


# Call sites --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _is_internal(filename: str) -> bool:
    """Code of torch or torch-fl: never the site a user should look at."""
    return filename.startswith((_TORCH_DIR, _FL_DIR))


def _user_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


@dataclass(frozen=True)
class Site:
    """A line of user code."""

    filename: str
    lineno: int

    @property
    def source(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        try:
            shown = os.path.relpath(self.filename)
        except ValueError:  # another drive (Windows)
            shown = self.filename
        return f"{self.filename if shown.startswith('..') else shown}:{self.lineno}"


@dataclass(frozen=True)
class DeviceRequest:
    """One call that asked for a device: where, what, and where it ran."""

    site: Site
    call: str       # 'torch.zeros', 'Tensor.to', 'torch.cuda.synchronize', ...
    requested: str  # 'cuda', 'cuda:1', 'cpu', 'nccl', ...
    resolved: str   # where it ran instead ('cpu', 'gloo'), or 'not aliased'
    cuda: bool      # a CUDA request (aliased, or a torch.cuda call with no counterpart)


Recorder = Callable[[DeviceRequest], None]


# Device arguments --------------------------------------------------------------------------------
def _is_cuda(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return value == _CUDA or value.startswith("cuda:")
    return kind is torch.device and value.type == _CUDA


def _is_ordinal(value: Any) -> bool:
    return type(value) is int  # bool is not an ordinal


@functools.lru_cache(maxsize=1024)
def _names_device(text: str) -> bool:
    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        return False
    return True


def _is_device(value: Any) -> bool:
    return type(value) is torch.device or (type(value) is str and _names_device(value))


def _label(value: Any) -> str:
    return str(value)


@functools.lru_cache(maxsize=2048)
def _call_name(func: Any) -> str:
    name = resolve_name(func) or getattr(func, "__qualname__", None) or repr(func)
    return name.replace("torch.Tensor.", "Tensor.", 1) if name.startswith("torch.Tensor.") else name


class _Mapped:
    """What a call asked for and where it goes."""

    __slots__ = ("cuda", "requested", "resolved")

    def __init__(self, requested: Any, resolved: Any, cuda: bool):
        self.requested, self.resolved, self.cuda = _label(requested), _label(resolved), cuda


class _DeviceMode(TorchFunctionMode):
    """Rewrites CUDA device arguments of every torch function called on this thread."""

    def __init__(self, alias: CudaAlias):
        super().__init__()
        self.alias = alias

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        alias = self.alias
        if alias._recorder is None and not _has_cuda(args, kwargs):
            return func(*args, **kwargs)  # the hot path: nothing to rewrite, nothing to record
        if torch.compiler.is_compiling():
            # Dynamo traces this method into the graph: no frame inspection (it cannot trace it), no
            # logging; the mapped device is a constant of the graph.
            args, kwargs = alias._map_plain(args, kwargs)
            return func(*args, **kwargs)
        if func in alias._wrappers:
            return func(*args, **kwargs)  # torch looked the method up on torch.Tensor: our patch, which maps
        if func is torch.device:  # device objects stay CUDA (module docstring); user-made ones are recorded
            result = func(*args, **kwargs)
            caller = _caller(sys._getframe(1), func)
            if alias._recorder is not None and caller is not None and not _is_internal(caller.f_code.co_filename):
                cuda = result.type == _CUDA
                alias._note("torch.device", _Mapped(result, alias.map_device(result) if cuda else result, cuda),
                            caller)
            return result
        caller = _caller(sys._getframe(1), func)
        args, kwargs, mapped = alias._map_args(args, kwargs, caller)
        if mapped is not None:
            alias._note(_call_name(func), mapped, caller)
        return func(*args, **kwargs)


def _has_cuda(args: tuple, kwargs: dict) -> bool:
    for value in args:
        if _is_cuda(value):
            return True
    if kwargs:
        device = kwargs.get("device")
        if device is not None and (_is_cuda(device) or _is_ordinal(device)):
            return True
        return kwargs.get("device_type") == _CUDA
    return False


def _caller(frame: FrameType | None, func: Any = None) -> FrameType | None:
    """The frame that called `func`, past the torch-function machinery (handle_torch_function, the
    alias's mode and, for functions written in Python, the function's own frame)."""
    code = getattr(func, "__code__", None)
    while frame is not None and (frame.f_code.co_filename in _MODE_MACHINERY or frame.f_code is code
                                 or frame.f_code is _MODE_CODE):
        frame = frame.f_back
    return frame


_MODE_CODE = _DeviceMode.__torch_function__.__code__
_ALIAS_FILE = _MODE_CODE.co_filename


def _from_torch_fl(frame: FrameType | None) -> bool:
    """Whether torch-fl itself made the call (through torch, or not): its analyses name devices on
    purpose (`torchfl coverage --device cuda` traces fake CUDA tensors) and must not be aliased."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_TORCH_DIR) or filename == _ALIAS_FILE):
            return filename.startswith(_FL_DIR)
        frame = frame.f_back
    return False


# The alias ---------------------------------------------------------------------------------------
@dataclass
class _Patch:
    owner: Any
    name: str
    original: Any
    owned: bool  # the attribute was in owner.__dict__ (else inherited: deleted again on restore)


_state_lock = threading.Lock()
_active: CudaAlias | None = None


class CudaAlias:
    """Makes CUDA-hard-coded code run on a torch.fl device; a context manager, or enable()/disable().

    Args:
        device: the target (default torch.fl.device(): FL_DEVICE, the config, else acc0).
        recorder: called with a DeviceRequest for every CUDA request and every device request made
            directly by user code (torchfl audit); None (the default) keeps the hot path to a check.

    Example:
        >>> with cuda_alias("cpu"):
        ...     x = torch.ones(2, device="cuda") * 2
        >>> x.device
        device(type='cpu')
    """

    def __init__(self, device: str | int | torch.device | None = None, *, recorder: Recorder | None = None):
        self._device = device
        self._recorder = recorder
        self._target: torch.device | None = None
        self._devices: list[torch.device] | None = None
        self._patches: list[_Patch] = []
        self._mode: _DeviceMode | None = None
        self._thread: int | None = None
        self._logged: set[tuple[Site, str]] = set()
        self._wrappers: set[Callable[..., Any]] = set()  # patched Tensor methods the mode may be handed
        self._lock = threading.Lock()
        self.enabled = False

    # Target ---------------------------------------------------------------------------------------
    @property
    def target(self) -> torch.device:
        """The device CUDA requests run on (resolved on first use: resolution activates routing)."""
        if self._target is None:
            with self._lock:
                if self._target is None:
                    target = resolve(self._device)
                    if target.type == _CUDA:
                        _log.info("the CUDA alias does nothing: the target %s is a real CUDA device", target)
                    self._target = target
        return self._target

    def _bypass(self, caller: FrameType | None) -> bool:
        """Leave a CUDA request alone: the target is CUDA itself, or torch-fl made the request."""
        return self.real_cuda or _from_torch_fl(caller)

    @property
    def real_cuda(self) -> bool:
        """True when the target is CUDA itself: every entry point then behaves as the original."""
        return self.target.type == _CUDA

    def map_device(self, value: Any) -> torch.device:
        """The device a CUDA device argument runs on: 'cuda' -> the target, 'cuda:N' or N -> accN (the
        target itself when it has no index, as the host CPU)."""
        if isinstance(value, torch.device):
            index = value.index
        elif isinstance(value, str):
            index = torch.device(value).index
        else:
            index = int(value)
        target = self.target
        if target.type == _CUDA:
            return torch.device(_CUDA, index)  # real CUDA: nothing to alias
        if index is None or target.index is None:
            return target
        if self._devices is None:
            from .. import devices

            self._devices = devices()
        if index < len(self._devices):
            return self._devices[index]
        raise DeviceNotFoundError(
            f"the CUDA code asks for {_CUDA}:{index}, but this machine has only {len(self._devices)} "
            f"virtual device(s) ({', '.join(f'acc{i} -> {d}' for i, d in enumerate(self._devices))}), "
            f"and the alias maps {_CUDA}:N to accN. Run fewer processes per machine or map more devices "
            f"with FL_DEVICE_MAP.")

    def _map_any(self, device: Any) -> torch.device:
        """A device argument of a torch.cuda call: None is the target, CUDA names and ordinals map."""
        if device is None:
            return self.target
        if _is_cuda(device) or _is_ordinal(device):
            return self.map_device(device)
        return device if isinstance(device, torch.device) else torch.device(device)

    def _map_args(self, args: tuple, kwargs: dict, caller: FrameType | None) -> tuple[tuple, dict, _Mapped | None]:
        """args and kwargs with CUDA device arguments mapped, and the first device argument seen
        (None when the call carried none, or when `caller` is torch-fl's own code)."""
        if self._recorder is None and not _has_cuda(args, kwargs):
            return args, kwargs, None
        if self._bypass(caller):
            return args, kwargs, None
        mapped: _Mapped | None = None
        if any(_is_cuda(a) for a in args):
            new_args = list(args)
            for i, value in enumerate(args):
                if _is_cuda(value):
                    new_args[i] = self.map_device(value)
                    mapped = mapped or _Mapped(value, new_args[i], True)
            args = tuple(new_args)
        elif self._recorder is not None:
            first = next((a for a in args if _is_device(a)), None)
            mapped = _Mapped(first, first, False) if first is not None else None
        device = kwargs.get("device")
        if device is not None:
            if _is_cuda(device) or _is_ordinal(device):
                kwargs = {**kwargs, "device": self.map_device(device)}
                mapped = mapped or _Mapped(device, kwargs["device"], True)
            elif mapped is None and self._recorder is not None:
                mapped = _Mapped(device, device, False)
        if kwargs.get("device_type") == _CUDA:
            kwargs = {**kwargs, "device_type": self.target.type}
            mapped = mapped or _Mapped(_CUDA, self.target.type, True)
        return args, kwargs, mapped

    def _map_plain(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """_map_args without caller, bypass or record: what torch.compile can trace."""
        args = tuple(self.map_device(a) if _is_cuda(a) else a for a in args)
        device = kwargs.get("device")
        if device is not None and (_is_cuda(device) or _is_ordinal(device)):
            kwargs = {**kwargs, "device": self.map_device(device)}
        if kwargs.get("device_type") == _CUDA:
            kwargs = {**kwargs, "device_type": self.target.type}
        return args, kwargs

    def _host(self) -> bool:
        return description_for(self.target).section("memory")["allocator"] == "host"

    # Logging and recording --------------------------------------------------------------------------
    def _note(self, call: str, mapped: _Mapped, caller: FrameType | None) -> None:
        """Log a CUDA request once per (site, call); record it, and user-made requests, for audits."""
        if self.real_cuda:
            return
        direct = caller is not None and not _is_internal(caller.f_code.co_filename)
        if not mapped.cuda and not (direct and self._recorder is not None):
            return
        frame = _user_frame(caller)
        site = Site(frame.f_code.co_filename, frame.f_lineno) if frame is not None else Site("<unknown>", 0)
        if self._recorder is not None:
            self._recorder(DeviceRequest(site, call, mapped.requested, mapped.resolved, mapped.cuda))
        if mapped.cuda and (site, call) not in self._logged:
            self._logged.add((site, call))
            _log.info("%s: %s(%s) runs on %s", site, call, mapped.requested, mapped.resolved)

    # Enable / disable -------------------------------------------------------------------------------
    def enable(self, *, resolve_now: bool = True) -> CudaAlias:
        """Install the alias for this process (see the module docstring for what and how).

        Args:
            resolve_now: resolve the target now (and do nothing when it is real CUDA). False defers it
                to the first CUDA request: the autoload hook runs inside ``import torch``, too early to
                activate routing.

        Raises:
            RuntimeError: when another alias is active.
        """
        global _active
        with _state_lock:
            if self.enabled:
                return self
            if _active is not None:
                raise RuntimeError("a CUDA alias is already active in this process (FL_CUDA_ALIAS=1, "
                                   "`torchfl run` or another cuda_alias()); disable it first")
            if not (resolve_now and self.real_cuda):
                try:
                    self._install()
                    self._mode = _DeviceMode(self)
                    self._mode.__enter__()
                except BaseException:
                    self._restore()
                    raise
                self._thread = threading.get_ident()
            self.enabled = True
            _active = self
        return self

    def disable(self) -> None:
        """Restore every patched attribute (the original objects) and leave the mode."""
        global _active
        with _state_lock:
            if not self.enabled:
                return
            if self._mode is not None:
                if threading.get_ident() != self._thread:
                    raise RuntimeError("disable the CUDA alias on the thread that enabled it (its "
                                       "TorchFunctionMode is on that thread's mode stack)")
                stack = _get_current_function_mode_stack()
                if not stack or stack[-1] is not self._mode:
                    raise RuntimeError("a TorchFunctionMode entered after the CUDA alias is still active; "
                                       "exit it before disabling the alias")
                self._mode.__exit__(None, None, None)
                self._mode = None
            self._restore()
            self.enabled = False
            _active = None

    def __enter__(self) -> CudaAlias:
        return self.enable()

    def __exit__(self, *exc: object) -> None:
        self.disable()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        owned = name in vars(owner)
        original = vars(owner)[name] if owned else None
        self._patches.append(_Patch(owner, name, original, owned))
        setattr(owner, name, replacement)

    def _restore(self) -> None:
        self._wrappers.clear()
        while self._patches:
            patch = self._patches.pop()
            if patch.owned:
                setattr(patch.owner, patch.name, patch.original)
            else:
                delattr(patch.owner, patch.name)

    def _install(self) -> None:
        _install_tensor_and_module(self)
        _install_cuda_module(self)
        _install_amp(self)
        _install_distributed(self)
        _install_loading(self)


def _live(alias: CudaAlias, caller: FrameType | None) -> bool:
    """Whether a patched torch.cuda entry point answers for torch.fl (user code, target not CUDA)."""
    return caller is not None and not _is_internal(caller.f_code.co_filename) and not alias.real_cuda


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
def cuda_alias(device: str | int | torch.device | None = None, *, recorder: Recorder | None = None) -> CudaAlias:
    """The CUDA alias for `device` (default torch.fl.device()): ``with cuda_alias(): ...`` or
    ``a = cuda_alias(); a.enable(); ...; a.disable()``. See CudaAlias and the module docstring."""
    return CudaAlias(device, recorder=recorder)


def active() -> CudaAlias | None:
    """The alias enabled in this process, if any."""
    return _active


@contextlib.contextmanager
def suspended():
    """Disable the active alias (if any) for a block, and enable it again after."""
    current = _active
    if current is None:
        yield None
        return
    current.disable()
    try:
        yield current
    finally:
        current.enable(resolve_now=current._target is not None)
