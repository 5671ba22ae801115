"""What a call under the CUDA alias asks for, and who made it: CUDA device arguments, the user's call
site, and the ``TorchFunctionMode`` that hands every torch call with a CUDA argument to the alias.

The bottom of the alias (alias.py's module docstring says what is aliased and why): alias.py (the
``AliasHooks``), patches.py and cuda_surface.py (the entry points it patches) all build on these helpers
and on :class:`AliasHooks`, what an entry point asks of the alias. This module imports none of them, and
the entry points name the protocol, not alias.py's class: no two of the four import each other (a test
in tests/test_architecture.py forbids cycles inside migrate/, type-only imports included).
"""

from __future__ import annotations

import functools
import linecache
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import torch
from torch.overrides import TorchFunctionMode, resolve_name

__all__ = ["CUDA", "AliasHooks", "DeviceMode", "DeviceRequest", "Mapped", "Recorder", "Site", "call_name", "calling_frame",
           "from_torch_fl", "has_cuda", "is_cuda", "is_device", "is_internal", "is_ordinal", "live", "log",
           "user_frame"]

log = logging.getLogger("torch_fl.migrate")

CUDA = "cuda"
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MODE_MACHINERY = (os.path.join(_TORCH_DIR, "overrides.py"),)
# Wrappers torch-fl compiles under a name in torch's folder so that they read as part of the function they
# wrap (routing/emu/streams.py: torch.zeros & co. with pin_memory=True on an emulated chip): the call's
# caller is the frame above them.
_TRANSPARENT_WRAPPERS = os.path.join(_TORCH_DIR, "_torch_fl_")


# Call sites --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def is_internal(filename: str) -> bool:
    """Code of torch or torch-fl: never the site a user should look at."""
    return filename.startswith((_TORCH_DIR, _FL_DIR))


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame outside torch and torch-fl, from `frame` outwards."""
    while frame is not None and is_internal(frame.f_code.co_filename):
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
def is_cuda(value: Any) -> bool:
    """'cuda', 'cuda:N' or a CUDA torch.device (exact types: this runs on every torch call)."""
    kind = type(value)
    if kind is str:
        return value == CUDA or value.startswith("cuda:")
    return kind is torch.device and value.type == CUDA


def is_ordinal(value: Any) -> bool:
    return type(value) is int  # bool is not an ordinal


@functools.lru_cache(maxsize=1024)
def _names_device(text: str) -> bool:
    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        return False
    return True


def is_device(value: Any) -> bool:
    return type(value) is torch.device or (type(value) is str and _names_device(value))


def has_cuda(args: tuple, kwargs: dict, ordinal_first: bool = False) -> bool:
    """Whether a call carries a CUDA device argument. `ordinal_first`: the first positional argument
    is a device when it is an int (``Tensor.to(0)``, ``Module.to(rank)``; a factory's ints are sizes)."""
    if ordinal_first and args and is_ordinal(args[0]):
        return True
    for value in args:
        if is_cuda(value):
            return True
    if kwargs:
        device = kwargs.get("device")
        if device is not None and (is_cuda(device) or is_ordinal(device)):
            return True
        return kwargs.get("device_type") == CUDA
    return False


@functools.lru_cache(maxsize=2048)
def call_name(func: Any) -> str:
    name = resolve_name(func) or getattr(func, "__qualname__", None) or repr(func)
    if name.startswith("_VariableFunctionsClass."):
        # torch.zeros & co. are methods of that C class; resolve_name only knows them while torch's namespace
        # holds the function itself (the emulator wraps the factories for pin_memory=True)
        name = "torch." + name.removeprefix("_VariableFunctionsClass.")
    return name.replace("torch.Tensor.", "Tensor.", 1) if name.startswith("torch.Tensor.") else name


class Mapped:
    """What a call asked for and where it goes."""

    __slots__ = ("cuda", "requested", "resolved")

    def __init__(self, requested: Any, resolved: Any, cuda: bool):
        self.requested, self.resolved, self.cuda = str(requested), str(resolved), cuda


class AliasHooks(Protocol):
    """What the patched entry points (patches.py, cuda_surface.py) and the mode ask of the alias
    (alias.CudaAlias implements it): where CUDA requests go, and how to record and undo what they do."""

    recorder: Recorder | None  # called with every CUDA request and user-made device request (audits)
    wrappers: set[Callable[..., Any]]  # patched Tensor methods the mode may be handed (they map already)
    answers: Any

    @property
    def target(self) -> torch.device:
        """The device CUDA requests run on."""
    @property
    def real_cuda(self) -> bool:
        """True when the target is CUDA itself: every entry point behaves as the original."""
    def map_device(self, value: Any) -> torch.device:
        """'cuda' -> the target, 'cuda:N' or N -> accN."""
    def map_any(self, device: Any) -> torch.device:
        """A device argument of a torch.cuda call (None is the target)."""
    def map_args(self, args: tuple, kwargs: dict, caller: FrameType | None,
                 ordinal_first: bool = False) -> tuple[tuple, dict, Mapped | None]:
        """args and kwargs with CUDA device arguments mapped, and the first device argument seen."""
    def map_plain(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """map_args without caller, bypass or record: what torch.compile can trace."""
    def bypass(self, caller: FrameType | None) -> bool:
        """Leave a CUDA request alone (the target is CUDA, or torch-fl made it)."""
    def host_memory(self) -> bool:
        """Whether the target's memory is the host's (pinning is a no-op there)."""
    def note(self, call: str, mapped: Mapped, caller: FrameType | None) -> None:
        """Log a CUDA request once per site; record it for audits."""
    def answered(self, query: str, answer: Any) -> None:
        """Record a query answered from the description, for the report."""
    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        """Set owner.name to replacement, undone on disable()."""
    def patched(self, owner: Any) -> bool:
        """Whether an attribute of `owner` is patched now."""


# The mode ----------------------------------------------------------------------------------------
class DeviceMode(TorchFunctionMode):
    """Rewrites CUDA device arguments of every torch function called on this thread, through `alias`."""

    def __init__(self, alias: AliasHooks):
        super().__init__()
        self.alias = alias

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        alias = self.alias
        if alias.recorder is None and not has_cuda(args, kwargs, func is torch.device):
            return func(*args, **kwargs)  # the hot path: nothing to rewrite, nothing to record
        if torch.compiler.is_compiling():
            # Dynamo traces this method into the graph: no frame inspection (it cannot trace it), no
            # logging; the mapped device is a constant of the graph.
            args, kwargs = alias.map_plain(args, kwargs)
            return func(*args, **kwargs)
        if func in alias.wrappers:
            return func(*args, **kwargs)  # torch looked the method up on torch.Tensor: our patch, which maps
        if func is torch.device:  # device objects stay CUDA (alias.py); user-made ones are recorded
            frame = calling_frame(sys._getframe(1), func)
            if len(args) == 1 and not kwargs and is_ordinal(args[0]) and not alias.bypass(frame):
                # torch.device(N) is "the N-th accelerator": in CUDA code, cuda:N (mapped where used).
                args = (CUDA, args[0])
            result = func(*args, **kwargs)
            if alias.recorder is not None and frame is not None and not is_internal(frame.f_code.co_filename):
                cuda = result.type == CUDA
                alias.note("torch.device", Mapped(result, alias.map_device(result) if cuda else result, cuda),
                            frame)
            return result
        frame = calling_frame(sys._getframe(1), func)
        args, kwargs, mapped = alias.map_args(args, kwargs, frame)
        if mapped is not None:
            alias.note(call_name(func), mapped, frame)
        return func(*args, **kwargs)


_MODE_CODE = DeviceMode.__torch_function__.__code__
_MODE_FILE = _MODE_CODE.co_filename


def calling_frame(frame: FrameType | None, func: Any = None) -> FrameType | None:
    """The frame that called `func`, past the torch-function machinery (handle_torch_function, the
    alias's mode and, for functions written in Python, the function's own frame)."""
    code = getattr(func, "__code__", None)
    while frame is not None and (frame.f_code.co_filename in _MODE_MACHINERY or frame.f_code is code
                                 or frame.f_code is _MODE_CODE
                                 or frame.f_code.co_filename.startswith(_TRANSPARENT_WRAPPERS)):
        frame = frame.f_back
    return frame


def from_torch_fl(frame: FrameType | None) -> bool:
    """Whether torch-fl itself made the call (through torch, or not): its analyses name devices on
    purpose (`torchfl coverage --device cuda` traces fake CUDA tensors) and must not be aliased."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_TORCH_DIR) or filename == _MODE_FILE):
            return filename.startswith(_FL_DIR)
        frame = frame.f_back
    return False


def live(alias: AliasHooks, frame: FrameType | None) -> bool:
    """Whether a patched torch.cuda entry point answers for torch.fl (user code, target not CUDA)."""
    return frame is not None and not is_internal(frame.f_code.co_filename) and not alias.real_cuda
