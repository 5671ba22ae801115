"""Virtual device ids (acc0, acc1, ...) -> real torch.device objects.

Which device ``torch.fl.device()`` means, highest precedence first: the argument, ``FL_DEVICE``, the
project config's ``device``, the user config's ``device``, then ``acc0``. What ``accN`` maps to:
``FL_DEVICE_MAP``, the project config's ``device_map``, the user config's ``device_map``, then
auto-detection (``accN`` is the N-th device visible to the selected backend). Physical names
(``cuda:1``, ``cpu``) and ``torch.device`` objects pass through unchanged.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from dataclasses import dataclass, field
from typing import Protocol

import torch

from . import _env, plugins
from ._names import EMULATION_PREFIX, VIRTUAL_ID
from ._state import process
from .description import registry
from .description.model import Description
from .errors import ConfigError, DeviceNotFoundError, TorchFLError, did_you_mean

_log = logging.getLogger("torch_fl.device")



def is_emulated(dev: torch.device) -> bool:
    """Whether `dev` is an emulated device: its type is the one the emulator borrowed PyTorch's PrivateUse1
    slot as (the process state's `emulated_type`, written at registration; '' before, when no emulated
    device can exist), so real devices never import the emulator to be told so."""
    return dev.type == process.emulated_type


@dataclass(frozen=True)
class Backend:
    """The backend selected for this process and why."""

    description: Description
    source: str  # 'FL_BACKEND', a config file path, or 'auto-detected'


def backend() -> Backend:
    """The selected backend (detected once per process, kept in the process state; `torch.fl.reset()`
    forgets it)."""
    found = process.backend
    if found is None:
        with process.lock:
            found = process.backend
            if found is None:
                desc, source = plugins.detect()
                found = process.backend = Backend(desc, source)
    return found


class Emulator(Protocol):
    """What resolution asks the emulator: routing/current.py sets it (`use_emulator`) when torch_fl
    loads, so this layer imports nothing above itself."""

    def active_chip(self) -> Description | None: ...  # the chip of an emulation in effect (emulate())
    def last_chip(self) -> Description | None: ...  # the chip the emulated device last ran as
    def available(self, check: bool) -> bool: ...  # whether the emu device can exist in this process
    def unavailable_reason(self) -> str: ...
    def ensure(self, count: int, chip: Description | None) -> bool: ...  # register emu:0..count-1; changed?
    def devices(self) -> list[torch.device]: ...


def use_emulator(emulator: Emulator) -> None:
    process.emulator = emulator


def _emu() -> Emulator:
    emulator = process.emulator
    if emulator is None:  # (torch_fl/__init__.py imports routing.current, which sets it)
        raise TorchFLError("internal error: the emulator port is not set; import torch_fl, not "
                           "torch_fl.device alone")
    return emulator


def _parse_physical(text: str, origin: str) -> torch.device:
    try:
        return torch.device(text)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{origin}: '{text}' is not a torch device (examples: cuda:1, npu:0, cpu)") from None


def parse_device_map(text: str, origin: str = "FL_DEVICE_MAP") -> dict[str, torch.device]:
    """Parse 'acc0=cuda:1,acc1=cpu' (the syntax, accN keys and duplicates are the env layer's)."""
    pairs = _env.FL_DEVICE_MAP.parse(text, origin)
    return _ordered({virtual: _parse_physical(physical, origin) for virtual, physical in pairs.items()})


def _ordered(mapping: dict[str, torch.device]) -> dict[str, torch.device]:
    return dict(sorted(mapping.items(), key=lambda item: int(item[0][3:])))


def explicit_map() -> tuple[dict[str, torch.device], str] | None:
    """The explicit map and where it came from, or None when the map is auto-detected."""
    text = _env.FL_DEVICE_MAP.text()
    if text:
        return parse_device_map(text), "FL_DEVICE_MAP"
    found = _env.config_value("device_map")
    if found:
        table, path = found
        for key in table:
            if not VIRTUAL_ID.match(key):
                raise ConfigError(f"{path}: device_map key '{key}' is not a virtual id like acc0")
        return _ordered({k: _parse_physical(v, path) for k, v in table.items()}), path
    return None


def device_map() -> dict[str, torch.device]:
    """Every virtual device of this machine, in order."""
    explicit = explicit_map()
    return explicit[0] if explicit else _detected_map()


def _detected_map(default: str | None = None, chip: Description | bool | None = False) -> dict[str, torch.device]:
    """The map when none is set: the emulated devices, else the detected backend's (`default`: the
    default device id when the caller has it already; `chip`: what `emulating` answered, when the caller
    has asked it already, False when not)."""
    if (emulating(default) if chip is False else chip) is not None:
        devices = emulated_devices(create=True)
        if devices:
            return {f"acc{i}": dev for i, dev in enumerate(devices)}
    desc = backend().description
    if desc.device_type == "cpu":
        return {"acc0": torch.device("cpu")}
    return {f"acc{i}": torch.device(desc.device_type, i) for i in range(plugins.device_count(desc))}


def default_device_id() -> str:
    """The id torch.fl.device() resolves with no argument (FL_DEVICE, config, else acc0)."""
    return _default_id()[0]


def _default_id() -> tuple[str, str]:
    value, origin = _env.device_choice()
    if value:
        return value, origin
    found = _env.config_value("device")
    if found:
        return found
    return "acc0", "default"


def _not_found(text: str, origin: str, mapping: dict[str, torch.device], why: str) -> DeviceNotFoundError:
    listing = ", ".join(f"{k} -> {v}" for k, v in mapping.items()) or "none"
    index = re.search(r"(\d{1,9})$", text)  # (a 5000-digit index is over int()'s limit)
    # 'gpu:1', 'npu1', 'device1': the user wants the N-th accelerator, whatever the spelling.
    if index and f"acc{int(index.group(1))}" in mapping and not VIRTUAL_ID.match(text):
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


@dataclass(frozen=True)
class ResolvedDevice:
    """One device spec, resolved once: what it names, the torch.device, and the governing description.

    Resolving is pure (`resolve_spec`): nothing is activated, and nothing registered. The facade
    (`torch.fl.device()`, `torch.fl.activate`, `torch.fl.emulate`) activates routing for it as a separate
    step; an emulated chip's device is registered (PyTorch's PrivateUse1 slot borrowed, once per process)
    at the first use of `device`.
    """

    spec: str                 # the text resolved ('acc0', 'cuda:1', 'emu:minimal', './chip.toml')
    # the device when it exists (None: an emulated chip's, registered at the first use of `device`; set
    # then, so it takes no part in equality or the hash, which the spec and the rest decide)
    known: torch.device | None = field(repr=False, compare=False)
    emulated: bool            # an emulated chip (emu:NAME): the data lives in CPU memory
    source: str               # where the mapping came from: 'FL_DEVICE_MAP', a config path,
                              # 'auto-detected', 'physical name', 'emulation', 'description file'
    origin: str = "argument"  # where the spec came from: 'argument', 'FL_DEVICE', a config path, 'default'
    governed_by: Description | None = field(default=None, repr=False)
    index: int = field(default=0, repr=False)  # which emulated device, while `known` is None (accN: N)

    @property
    def device(self) -> torch.device:
        """The real torch.device tensors go to. An emulated chip's registers the emulated backend on first
        use; where PrivateUse1 belongs to a vendor plugin, the emulated chip is the CPU under a dispatch mode."""
        found = self.known
        if found is None:
            devices = emulated_devices(create=True, chip=self.governed_by)
            found = devices[self.index] if self.index < len(devices) else torch.device("cpu")
            object.__setattr__(self, "known", found)  # (frozen: the device is fixed once it exists)
        return found

    @property
    def id(self) -> str:
        """The spec as given ('acc0', 'emu:minimal', ...)."""
        return self.spec

    @functools.cached_property
    def description(self) -> Description:
        """The description that governs work on `device`. Looked up on first use: a physical name
        needs no backend detection until then (the CUDA alias resolves one halfway through
        `import torch`)."""
        return self.governed_by if self.governed_by is not None else description_for(self.device)


def resolve_spec(device: str | int | torch.device | None = None) -> ResolvedDevice:
    """Resolve a device spec without side effects: a virtual id (acc1), a physical name (cuda:0),
    an index, a torch.device, an emulated chip (emu:NAME or emu:./chip.toml), or a description (a name
    like 'minimal' or a path like './chip.toml', governing this machine's device of its type).

    Example:
        >>> torch_fl.device.resolve_spec("emu:minimal").description.name  # doctest: +SKIP
        'minimal'
    """
    if isinstance(device, torch.device):
        return _from_physical(device, str(device), "physical name", "argument")
    with _env.one_reading():
        return _resolve_text(device)


def _resolve_text(device: str | int | None) -> ResolvedDevice:
    origin = "argument"
    if device is None:
        device, origin = _default_id()
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"acc{device}"
    if not isinstance(device, str):
        raise TypeError(f"torch.fl.device() takes a str, int or torch.device, not {type(device).__name__}")
    text = device.strip()
    if text.startswith(EMULATION_PREFIX):
        return _emulated(text, origin)
    if VIRTUAL_ID.match(text):
        explicit = explicit_map()
        if explicit is None:
            chip = emulating(None if origin == "argument" else text)
            emulated = _emulated_virtual(text, origin) if chip is not None else None
            if emulated is not None:
                return emulated
            mapping = _detected_map(chip=chip)
        else:
            mapping = explicit[0]
        if text not in mapping:
            raise _not_found(text, origin, mapping, "does not exist")
        return _from_physical(mapping[text], text, explicit[1] if explicit else "auto-detected", origin)
    try:
        physical = torch.device(text)
    except (RuntimeError, ValueError):
        physical = None
    if physical is not None:
        return _from_physical(physical, text, "physical name", origin)
    if names_description(text):
        return _described(text, origin)
    raise _not_found(text, origin, device_map(), "is neither a virtual id (accN) nor a torch device")


def _from_physical(dev: torch.device, spec: str, source: str, origin: str) -> ResolvedDevice:
    emulated = is_emulated(dev)
    return ResolvedDevice(spec, dev, emulated, "emulation" if emulated and source == "auto-detected" else source,
                          origin)


def _emulated_virtual(text: str, origin: str) -> ResolvedDevice | None:
    """accN of a process that emulates a chip (FL_DEVICE=emu:NAME, emulate()), without registering the
    emulated devices (the first use of .device does); None where the map answers: the device cannot
    exist (the dispatch mode runs on the backend's devices), or no such index (its error)."""
    index = int(text[3:])
    emu = process.emulator or _emu()
    if index >= _emu_count() or not emu.available(False):
        return None
    return ResolvedDevice(text, None, True, "emulation", origin, index=index)


def _emulated(text: str, origin: str) -> ResolvedDevice:
    name = text[len(EMULATION_PREFIX):]
    if name.isdigit() and emulated_devices():
        # emu:1, a physical name of the emulated backend
        index = int(name)
        if index >= len(emulated_devices()):
            raise _not_found(text, origin, device_map(), "does not exist")
        return ResolvedDevice(text, emulated_devices()[index], True, "physical name", origin)
    known = process.descriptions  # (a name found at once: torch.fl.device() resolves it on every call)
    desc = known.get(name) if known is not None else None
    if desc is None:
        desc = registry.get(name)  # a path, or not discovered yet; validates the name ("did you mean")
    # pure: the emulated device is registered at the first use of .device (ResolvedDevice.device)
    return ResolvedDevice(text, None, True, "emulation", origin, desc)


def emulated_devices(create: bool = False, chip: Description | None = None, *,
                     check: bool = True) -> list[torch.device]:
    """The emulated devices (emu:0..emu:N-1, N = FL_EMU_DEVICES); `create` registers the emu backend
    (PyTorch's PrivateUse1 slot) on first use. Empty when it is not registered, or when a vendor plugin
    owns PrivateUse1. `check`: run the emulator's autograd check (one backward) if still pending;
    registration at import leaves it to the device's first use."""
    emu = process.emulator or _emu()  # (_emu: the error when it is not set)
    available = emu.available(check)
    # the first registration names the slot after the chip (npu:0 for emu:npu; routing/emu/vendor.py)
    if create and available and emu.ensure(_emu_count(), chip if chip is not None else _emulated_chip()):
        available = emu.available(check)  # (a registration leaves its autograd check to the first use)
    if not available:
        if create and emu.unavailable_reason() not in _warned:
            _warned.add(emu.unavailable_reason())
            _log.warning("emulated chips run on the CPU under a dispatch mode (host work is checked too, and "
                         "a forgotten .to(device) goes unnoticed): the emu device is unavailable, because %s.",
                         emu.unavailable_reason())
        return []
    return emu.devices()


_warned: set[str] = set()


def emulated_early() -> bool:
    """Register the emulated device FL_DEVICE names at import (routing/current.py's register_early says
    why); False when it is not registered: the chip's real plugin is installed, or no emu device can exist."""
    chip = _emulated_chip()
    if chip is not None and chip.plugin and _plugin_installed(chip.plugin):
        _log.info("device %s: %s is installed, so the emulated device is not registered at import (the "
                  "plugin owns PyTorch's PrivateUse1 slot once imported)", _env.device_choice()[0], chip.plugin)
        return False
    return bool(emulated_devices(create=True, check=False))


def _plugin_installed(name: str) -> bool:
    """Whether the real plugin `name` can be imported (torch-fl's emulation of it does not count)."""
    import importlib.machinery

    from .description.probe import emulated_plugin

    if name in sys.modules:
        return not emulated_plugin(sys.modules[name])
    return importlib.machinery.PathFinder.find_spec(name) is not None


def _emulated_chip() -> Description | None:
    """The chip FL_DEVICE (or the config) emulates, for naming the emulated slot; None when unknown."""
    try:
        return emulating()
    except TorchFLError:  # an unknown chip name is reported where the device is resolved
        return None


def _emu_count() -> int:
    return int(_env.FL_EMU_DEVICES.value())


def emulating(default: str | None = None) -> Description | None:
    """The emulated chip this process runs as: the default device's (FL_DEVICE or config emu:NAME), else
    the active torch.fl.emulate(); None when it runs on real devices. `default`: the default device id,
    when the caller has read it already."""
    active = (process.emulator or _emu()).active_chip()
    if active is not None:
        return active
    text = (_default_id()[0] if default is None else default).strip()
    if text.startswith(EMULATION_PREFIX) and not text[len(EMULATION_PREFIX):].isdigit():
        return registry.get(text[len(EMULATION_PREFIX):])
    return None


def names_description(text: str) -> bool:
    return registry.is_path(text) or text in registry.descriptions()


def _described(text: str, origin: str) -> ResolvedDevice:
    """A description named as a device: it governs this machine's device of its type."""
    desc = registry.get(text)
    mapping = device_map()
    dev = next((d for d in mapping.values() if d.type == desc.device_type), None)
    if dev is None:
        raise _not_found(text, origin, mapping,
                         f"describes a '{desc.device_type}' chip, which this machine does not have (to "
                         f"run it on the CPU as that chip use 'emu:{text}')")
    return ResolvedDevice(text, dev, False, "description file" if desc.path else "description", origin, desc)


def governing(device: str | int | torch.device | None = None) -> Description:
    """The description that governs `device` (any spec resolve_spec accepts, or a description name
    or path even when this machine has no device of its type); activates nothing."""
    if isinstance(device, str) and names_description(device.strip()) and \
            not device.strip().startswith(EMULATION_PREFIX):
        return registry.get(device.strip())
    try:
        return resolve_spec(device).description
    except DeviceNotFoundError:
        if not isinstance(device, str) or VIRTUAL_ID.match(device.strip()):
            raise
        registry.get(device.strip())  # neither a device nor a description: "did you mean" on names
        raise


def resolve(device: str | int | torch.device | None = None) -> torch.device:
    """The torch.device a spec names (a virtual id, physical name, emu:NAME, index or torch.device);
    activates nothing. ``torch.fl.device()`` is routing.current.use_device: this, and routing's first
    activation."""
    return device if isinstance(device, torch.device) else resolve_spec(device).device


def description_for(dev: torch.device) -> Description:
    """The description that governs a physical device: the selected backend when its type matches,
    else the highest-priority description of that device type."""
    if is_emulated(dev):
        return emulating() or _last_emulated() or registry.get("cpu")
    selected = backend().description
    if selected.device_type == dev.type:
        return selected
    matching = [d for d in registry.descriptions().values() if d.device_type == dev.type]
    if not matching:
        return registry.get("cpu") if dev.type in ("cpu", "meta") else selected
    return max(matching, key=lambda d: d.section("detect")["priority"])


def _last_emulated() -> Description | None:
    return _emu().last_chip()
