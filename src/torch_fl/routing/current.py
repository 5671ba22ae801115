"""The one runtime object: which device this process runs on, and whether routing is active for it.

Resolving a device spec is pure (``torch_fl.device.resolve_spec``: no routing imported, nothing
activated, nothing registered: an emulated chip's device is registered at the first use of its
``.device``). What acts on the process is `runtime`, the one owner of its state (`runtime.state`, the
process state of torch_fl/_state.py, where every layer keeps its part):

- ``torch.fl.device()`` is ``runtime.use``: it resolves, and the first time it meets the process's own
  device (the backend's type, or an emulated chip) it activates routing for it;
- ``torch.fl.activate()`` / ``emulate()`` (routing/__init__.py) push on the activation stack that
  routing/activation.py holds, which `runtime.active` reads for the emulator and analysis;
- with ``FL_DEVICE=emu:NAME`` set before the process starts, ``import torch_fl`` registers the emulated
  device (`register_early`) and routing activates at that device's first tensor, for code that never
  calls ``torch.fl.device()`` (``x.npu()``, a library's own device choice);
- ``torch.fl.reset()`` deactivates and forgets the detected backend, the descriptions and the route
  tables (`reset`, one call for all of it).

The device layer asks the emulator through the port set here (`device.use_emulator`), so it never
imports routing: the emulated device registers when a resolved emulated chip's device is first used.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import torch

from .. import device as _device
from .._names import EMULATION_PREFIX
from .._state import ProcessState, process
from ..description.model import Description
from . import activation


class _EmulatorPort:
    """What the device layer asks the emulator (device.Emulator), answered from routing/emu: loaded only
    when a spec names an emulated chip, so real devices never import it. Its first question loads it and
    binds routing/emu's functions as the port's own attributes: torch.fl.device() asks the port five times
    a call, and a forwarding method (or a function-level import) would add calls to each."""

    _BOUND: ClassVar[dict[str, str]] = {"last_chip": "chip", "available": "available", "unavailable_reason": "unavailable_reason",
              "ensure": "ensure", "devices": "devices"}

    def __getattr__(self, name: str) -> Any:
        if name not in self._BOUND:
            raise AttributeError(name)
        from . import emu

        for attribute, function in self._BOUND.items():
            setattr(self, attribute, getattr(emu, function))
        return getattr(self, name)

    def active_chip(self) -> Description | None:
        current = activation.active()
        return current.description if current is not None and current.emulated else None


class Runtime:
    """The process's device and its routing: activated once, by the first use of the device. It owns the
    process's state (`state`, torch_fl/_state.py: descriptions, backend, activations, kernels, route tables,
    the emulated devices): `reset` forgets it in one call."""

    def __init__(self, state: ProcessState) -> None:
        self._lock = threading.RLock()  # (activation may resolve devices again)
        self.state = state

    @property
    def activated(self) -> bool:
        """Whether routing was activated for the process's device (reset() clears it)."""
        return self.state.activated

    @activated.setter
    def activated(self, value: bool) -> None:
        self.state.activated = value

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
        if not self.state.activated and (resolved.emulated
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
        """Deactivate routing and forget the detected backend, the discovered descriptions and the route
        tables built from them (after changing FL_* variables); the next ``torch.fl.device()`` activates
        routing again. Registered kernels stay (their handles remove them), and so do the emulated devices
        (PyTorch cannot unregister a backend)."""
        activation.deactivate()
        with self._lock:
            self.activated = False
            self.state.forget()

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


runtime = Runtime(process)
use_device = runtime.use  # torch.fl.device(): resolve, and activate routing at the first use
_device.use_emulator(_EmulatorPort())
