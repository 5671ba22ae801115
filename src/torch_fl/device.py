"""Virtual device ids (acc0, acc1, ...) -> real torch.device objects.

Which device ``torch.fl.device()`` means, highest precedence first: the argument, ``FL_DEVICE``, the
project config's ``device``, the user config's ``device``, then ``acc0``. What ``accN`` maps to:
``FL_DEVICE_MAP``, the project config's ``device_map``, the user config's ``device_map``, then
auto-detection (``accN`` is the N-th device visible to the selected backend). Physical names
(``cuda:1``, ``cpu``) and ``torch.device`` objects pass through unchanged.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import torch

from . import _env, config, plugins
from .description import registry
from .description.model import Description
from .errors import ConfigError, DeviceNotFoundError, did_you_mean

_VIRTUAL = re.compile(r"^acc(\d+)$")
EMULATION_PREFIX = "emu:"


@dataclass(frozen=True)
class Backend:
    """The backend selected for this process and why."""

    description: Description
    source: str  # 'FL_BACKEND', a config file path, or 'auto-detected'


_lock = threading.Lock()
_backend: Backend | None = None


def backend() -> Backend:
    """The selected backend (detected once per process; `reset` forgets it)."""
    global _backend
    if _backend is None:
        with _lock:
            if _backend is None:
                desc, source = plugins.detect()
                _backend = Backend(desc, source)
    return _backend


def reset() -> None:
    """Deactivate routing and forget the detected backend and discovered descriptions (after changing
    FL_* variables); the next device resolution activates routing again."""
    global _backend, _auto_activated
    from . import routing

    routing.deactivate()
    with _lock:
        _backend = None
        _auto_activated = False
    registry.reload()


_auto_activated = False


def _activate_once(device: str | None) -> None:
    """Routing is activated by the first device resolution (see torch_fl.routing)."""
    global _auto_activated
    if _auto_activated:
        return
    _auto_activated = True  # set first: activation resolves devices itself
    from . import routing

    try:
        routing.activate(device)
    except Exception:
        _auto_activated = False
        raise


def _parse_physical(text: str, origin: str) -> torch.device:
    try:
        return torch.device(text)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{origin}: '{text}' is not a torch device (examples: cuda:1, npu:0, cpu)") from None


def parse_device_map(text: str, origin: str = "FL_DEVICE_MAP") -> dict[str, torch.device]:
    """Parse 'acc0=cuda:1,acc1=cpu'."""
    mapping: dict[str, torch.device] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        virtual, sep, physical = (s.strip() for s in item.partition("="))
        if not sep or not _VIRTUAL.match(virtual):
            raise ConfigError(f"{origin}: '{item}' is not of the form accN=DEVICE "
                              f"(example: FL_DEVICE_MAP='acc0=cuda:1,acc1=cpu')")
        mapping[virtual] = _parse_physical(physical, origin)
    return _ordered(mapping)


def _ordered(mapping: dict[str, torch.device]) -> dict[str, torch.device]:
    return dict(sorted(mapping.items(), key=lambda item: int(item[0][3:])))


def explicit_map() -> tuple[dict[str, torch.device], str] | None:
    """The explicit map and where it came from, or None when the map is auto-detected."""
    text = _env.FL_DEVICE_MAP.get()
    if text:
        return parse_device_map(text), "FL_DEVICE_MAP"
    found = config.lookup("device_map")
    if found:
        table, path = found
        for key in table:
            if not _VIRTUAL.match(key):
                raise ConfigError(f"{path}: device_map key '{key}' is not a virtual id like acc0")
        return _ordered({k: _parse_physical(v, path) for k, v in table.items()}), path
    return None


def device_map() -> dict[str, torch.device]:
    """Every virtual device of this machine, in order."""
    explicit = explicit_map()
    if explicit:
        return explicit[0]
    desc = backend().description
    if desc.device_type == "cpu":
        return {"acc0": torch.device("cpu")}
    return {f"acc{i}": torch.device(desc.device_type, i) for i in range(plugins.device_count(desc))}


def default_device_id() -> str:
    """The id torch.fl.device() resolves with no argument (FL_DEVICE, config, else acc0)."""
    return _default_id()[0]


def _default_id() -> tuple[str, str]:
    value = _env.FL_DEVICE.get()
    if value:
        return value, "FL_DEVICE"
    found = config.lookup("device")
    if found:
        return found
    return "acc0", "default"


def _not_found(text: str, origin: str, mapping: dict[str, torch.device], why: str) -> DeviceNotFoundError:
    listing = ", ".join(f"{k} -> {v}" for k, v in mapping.items()) or "none"
    index = re.search(r"(\d+)$", text)
    # 'gpu:1', 'npu1', 'device1': the user wants the N-th accelerator, whatever the spelling.
    if index and f"acc{int(index.group(1))}" in mapping and not _VIRTUAL.match(text):
        hint = f" Did you mean 'acc{int(index.group(1))}'?"
    else:
        candidates = list(mapping) + sorted({str(v) for v in mapping.values()})
        hint = did_you_mean(text, candidates) or f" Use '{next(iter(mapping), 'cpu')}' for the first device."
    source = "" if origin == "argument" else f" (from {origin})"
    explicit = explicit_map()
    selected = backend()
    if explicit:
        where = f"map from {explicit[1]}"
    else:
        where = f"{selected.description.name} backend, {selected.source}"
    env = selected.description.visible_devices_env
    return DeviceNotFoundError(
        f"device '{text}'{source} {why}. Devices on this machine ({where}): {listing}.{hint} To map "
        f"virtual ids to other devices set FL_DEVICE_MAP='acc0=cuda:1,acc1=cuda:0'"
        + (f" or check {env}" if env else "") + ".")


def resolve(device: str | int | torch.device | None = None) -> torch.device:
    """A real torch.device for a virtual id, physical name, emu:NAME, index or torch.device.

    The first resolution in a process activates operator routing for the device (torch_fl.routing)."""
    if isinstance(device, torch.device):
        return device
    resolved = _resolve(device)
    if not _auto_activated and _drives(device, resolved):
        _activate_once(device if isinstance(device, str) else None)
    return resolved


def _drives(device: str | int | None, resolved: torch.device) -> bool:
    """Whether resolving `device` activates routing: the process's backend device or an emulated chip
    (a physical name of another type, e.g. 'cuda:1' on a CPU machine, passes through untouched)."""
    if isinstance(device, str) and device.strip().startswith(EMULATION_PREFIX):
        return True
    if device is None and _default_id()[0].startswith(EMULATION_PREFIX):
        return True
    return resolved.type == backend().description.device_type


def _resolve(device: str | int | None) -> torch.device:
    origin = "argument"
    if device is None:
        device, origin = _default_id()
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"acc{device}"
    if not isinstance(device, str):
        raise TypeError(f"torch.fl.device() takes a str, int or torch.device, not {type(device).__name__}")
    text = device.strip()
    if text.startswith(EMULATION_PREFIX):
        registry.get(text[len(EMULATION_PREFIX):])  # validates the name ("did you mean" on typos)
        return torch.device("cpu")
    if _VIRTUAL.match(text):
        mapping = device_map()
        if text not in mapping:
            raise _not_found(text, origin, mapping, "does not exist")
        return mapping[text]
    try:
        return torch.device(text)
    except (RuntimeError, ValueError):
        raise _not_found(text, origin, device_map(),
                         "is neither a virtual id (accN) nor a torch device") from None


def description_for(dev: torch.device) -> Description:
    """The description that governs a physical device: the selected backend when its type matches,
    else the highest-priority description of that device type."""
    selected = backend().description
    if selected.device_type == dev.type:
        return selected
    matching = [d for d in registry.descriptions().values() if d.device_type == dev.type]
    if not matching:
        return registry.get("cpu") if dev.type in ("cpu", "meta") else selected
    return max(matching, key=lambda d: d.section("detect")["priority"])
