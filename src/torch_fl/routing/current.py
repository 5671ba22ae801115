"""The one runtime object: which device this process runs on, and whether routing is active for it.

Resolving a device spec is pure (``torch_fl.device.resolve_spec``: no routing imported, nothing
activated). What acts on the process is `runtime`, the one owner of that state:

- ``torch.fl.device()`` is ``runtime.use``: it resolves, and the first time it meets the process's own
  device (the backend's type, or an emulated chip) it activates routing for it;
- ``torch.fl.activate()`` / ``emulate()`` (routing/__init__.py) push on the activation stack that
  routing/activation.py holds, which `runtime.active` reads for the emulator and analysis;
- with ``FL_DEVICE=emu:NAME`` set before the process starts, ``import torch_fl`` registers the emulated
  device (`register_early`) and routing activates at that device's first tensor, for code that never
  calls ``torch.fl.device()`` (``x.npu()``, a library's own device choice);
- ``torch.fl.reset()`` deactivates and forgets the detected backend (`reset`).

The device layer asks the emulator through the port set here (`device.use_emulator`), so it never
imports routing: the emulated device registers when a spec names an emulated chip.
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType

import torch

from .. import device as _device
from .._names import EMULATION_PREFIX
from ..description.model import Description
from . import activation


class _EmulatorPort:
    """What the device layer asks the emulator (device.Emulator), answered from routing/emu: loaded only
    when a spec names an emulated chip, so real devices never import it."""

    @functools.cached_property
    def _emu(self) -> ModuleType:
        # imported once, then an attribute: a function-level import costs three calls every time, and
        # torch.fl.device() asks the port four times a call
        from . import emu

        return emu

    def active_chip(self) -> Description | None:
        current = activation.active()
        return current.description if current is not None and current.emulated else None

    def last_chip(self) -> Description | None:
        return self._emu.chip()

    def available(self, check: bool) -> bool:
        return self._emu.available(check)

    def unavailable_reason(self) -> str:
        return self._emu.unavailable_reason()

    def ensure(self, count: int, chip: Description | None) -> None:
        self._emu.ensure(count, chip)

    def devices(self) -> list[torch.device]:
        return self._emu.devices()


class Runtime:
    """The process's device and its routing: activated once, by the first use of the device."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # (activation may resolve devices again)
        self.activated = False  # routing was activated for the process's device (reset() clears it)

    @property
    def active(self) -> activation.Activation | None:
        """The innermost activation (the route table in effect), or None."""
        return activation.active()

    def use(self, spec: str | int | torch.device | None = None) -> torch.device:
        """What ``torch.fl.device()`` does: a real torch.device for a virtual id, physical name, emu:NAME,
        index or torch.device; the first one that is this process's device activates routing for it."""
        if isinstance(spec, torch.device):
            return spec
        resolved = _device.resolve_spec(spec)
        if not self.activated and (resolved.emulated
                                   or resolved.device.type == _device.backend().description.device_type):
            # the process's backend device or an emulated chip; a physical name of another type (cuda:1 on
            # a CPU machine) passes through untouched
            self.ensure(resolved)
        return resolved.device

    def ensure(self, resolved: _device.ResolvedDevice) -> None:
        """Activate routing for `resolved` unless the process's routing was activated already."""
        with self._lock:
            if self.activated:
                return
            self.activated = True  # set first: activation resolves devices itself
            try:
                activation.activate_resolved(resolved)
            except Exception:
                self.activated = False
                raise

    def activate_default(self) -> None:
        """The emulated device's first tensor: activate routing as ``torch.fl.device()`` would."""
        if not self.activated:
            self.use(None)

    def reset(self) -> None:
        """Deactivate routing and forget the detected backend and discovered descriptions (after changing
        FL_* variables); the next ``torch.fl.device()`` activates routing again."""
        activation.deactivate()
        with self._lock:
            self.activated = False
        _device.forget()

    def register_early(self) -> None:
        """With FL_DEVICE=emu:NAME set before the process starts, register the emu device at import:
        PyTorch's autograd engine fixes its devices at the first backward pass, which may come before the
        first torch.fl.device() call.

        Not when the chip's real plugin is installed: the slot is its to take when it is imported (its own
        torch.backends hook, or the script's `import torch_npu`), and one borrowed first would make that
        import fail; the emulated device then registers at the first torch.fl.device() call, if the slot
        is free."""
        from .. import _env

        value, origin = _env.device_choice()
        if not value.startswith(EMULATION_PREFIX):
            return
        if origin.startswith(_env.FL_RANK_DEVICES.name) and not _env.rank_known():
            return  # which entry is this process's is known only once the launcher sets its rank
        if not _device.emulated_early():
            return
        from . import emu

        # Code that never calls torch.fl.device() is checked from its first device tensor, not run
        # unchecked: that tensor activates the chip's routing as torch.fl.device() would.
        emu.state.activate_at_first_tensor = self.activate_default


runtime = Runtime()
use_device = runtime.use  # torch.fl.device(): resolve, and activate routing at the first use
_device.use_emulator(_EmulatorPort())
