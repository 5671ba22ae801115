"""Which function of the device's own runtime answers a torch.fl call: ``torch.accelerator`` when it speaks
for the device, then the device module ``getattr(torch, device_type)`` (torch.cuda, torch.xpu, torch.mps,
torch.npu once torch_npu is imported, ...), from the table ``CALL_ROUTES``; and the description facts that make a
call unneeded (a host allocator, sync submission).

Below runtime.py (the ``torch.cuda``-style facade) and streams.py (streams and events), which both ask it:
neither imports the other's internals.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from . import plugins
from .description.model import Description
from .device import description_for, is_emulated
from .errors import RuntimeUnsupportedError

__all__ = ["CALL_ROUTES", "accelerator", "device_module", "is_host", "is_sync", "native", "synchronize"]

_log = logging.getLogger("torch_fl.runtime")

# Facade call -> (torch.accelerator attribute or None, device-module attributes in preference order).
# Names differ across modules (torch.mps.current_allocated_memory is torch.cuda.memory_allocated).
CALL_ROUTES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "is_available": ("is_available", ("is_available",)),
    "device_count": ("device_count", ("device_count",)),
    "current_device": ("current_device_index", ("current_device",)),
    "set_device": ("set_device_index", ("set_device",)),
    "synchronize": ("synchronize", ("synchronize",)),
    "memory_allocated": ("memory_allocated", ("memory_allocated", "current_allocated_memory")),
    "max_memory_allocated": ("max_memory_allocated", ("max_memory_allocated",)),
    "reset_peak_memory_stats": ("reset_peak_memory_stats", ("reset_peak_memory_stats",)),
    "empty_cache": ("empty_cache", ("empty_cache",)),
    "mem_get_info": ("get_memory_info", ("mem_get_info",)),
    "manual_seed": (None, ("manual_seed_all", "manual_seed")),
    "get_device_properties": (None, ("get_device_properties",)),
}

# Candidates ------------------------------------------------------------------------------------------
def is_host(desc: Description) -> bool:
    return desc.section("memory")["allocator"] == "host"


def is_sync(desc: Description) -> bool:
    return desc.section("streams")["submission"] == "sync"


def device_module(dev: torch.device) -> ModuleType | None:
    desc = description_for(dev)
    if desc.device_type == dev.type and not is_emulated(dev):  # emulated npu:0's torch.npu is torch-fl's
        plugins.import_plugin(desc)  # torch.npu and friends exist only once their plugin is imported
    return getattr(torch, dev.type, None)


def accelerator(dev: torch.device) -> ModuleType | None:
    """torch.accelerator when it speaks for `dev` (its calls act on the current accelerator only)."""
    if is_emulated(dev):
        return None  # a Python backend's C++ hooks report nothing; its module (torch.emu) does
    acc = getattr(torch, "accelerator", None)
    current = getattr(acc, "current_accelerator", None)
    if current is None:
        return None
    found = current()
    return acc if found is not None and found.type == dev.type else None


def _candidates(name: str, dev: torch.device) -> list[tuple[str, Callable[..., Any]]]:
    acc_attr, module_attrs = CALL_ROUTES[name]
    found: list[tuple[str, Callable[..., Any]]] = []
    acc = accelerator(dev) if acc_attr else None
    if acc is not None and callable(getattr(acc, acc_attr, None)):
        found.append((f"torch.accelerator.{acc_attr}", getattr(acc, acc_attr)))
    module = device_module(dev)
    for attr in module_attrs:
        fn = getattr(module, attr, None)
        if callable(fn):
            found.append((f"torch.{dev.type}.{attr}", fn))
    return found


@functools.lru_cache(maxsize=256)
def _positional_slots(fn: Callable[..., Any]) -> int | None:
    """How many positional arguments `fn` takes (None: unknown or unbounded)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None  # builtins without a signature: assume they take the device like torch.cuda's
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _invoke(fn: Callable[..., Any], dev: torch.device, args: tuple[Any, ...]) -> Any:
    # torch.mps.synchronize() and torch.mps.current_allocated_memory() take no device: MPS has one.
    slots = _positional_slots(fn)
    return fn(*args, dev) if slots is None or slots > len(args) else fn(*args)


_MISSING: Any = object()


def native(name: str, dev: torch.device, *args: Any, fallback: Callable[[], Any] = _MISSING) -> Any:
    """Call the first candidate of `name` that works; `fallback()` when none exists or all fail."""
    first_error: Exception | None = None
    for label, fn in _candidates(name, dev):
        try:
            return _invoke(fn, dev, args)
        except (RuntimeError, NotImplementedError, TypeError, AttributeError) as exc:
            # torch.accelerator may have a function the backend's allocator does not implement.
            _log.debug("%s(%s) raised %s: %s; trying the next candidate", label, dev, type(exc).__name__, exc)
            first_error = first_error or exc
    if fallback is not _MISSING:
        return fallback()
    if first_error is not None:
        raise first_error
    acc_attr, module_attrs = CALL_ROUTES[name]
    looked = ([f"torch.accelerator.{acc_attr}"] if acc_attr else []) + [f"torch.{dev.type}.{a}" for a in module_attrs]
    raise RuntimeUnsupportedError(
        f"torch.fl.{name}({dev}): the '{description_for(dev).name}' backend offers none of "
        f"{', '.join(looked)}. Update its plugin, or use a description whose [memory]/[streams] "
        f"sections say the call is unneeded.")


def synchronize(dev: torch.device) -> None:
    """Wait for `dev`'s queued work (a resolved device): nothing to wait for where submission is sync."""
    if is_sync(description_for(dev)):
        return
    native("synchronize", dev)
