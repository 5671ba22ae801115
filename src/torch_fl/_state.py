"""The process's state, in one object (`process`): every layer keeps what it learns about this process here,
and the runtime object (routing/current.py, `torch_fl.reset()`) forgets it in one call.

What each part is, and which layer writes it:

- ``descriptions``, ``shadowed``: the discovered device descriptions (description/registry.py);
- ``backend``: the detected backend and why (device.py); ``emulator``: the port through which the device
  layer asks the emulator (routing/current.py sets it when torch_fl loads);
- ``emulated_type``: the device type of emulated tensors once PyTorch's PrivateUse1 slot is borrowed for
  them ('' before: no device is emulated), written by the emulator at registration and read by
  ``device.is_emulated`` (so the device layer never looks the emulator's module up);
- ``activations``, ``kernels``, ``tables``, ``activated``: the routing installed, the kernels of
  ``torch.fl.register_kernel`` and the route tables of past activations (routing/activation.py), and
  whether the process's own device activated routing (routing/current.py);
- ``emulated``: the emulated devices' state (routing/emu/slot.py) once the emulator is loaded, and
  ``transfers`` / ``reset_transfers``: its host-device copy counters, which route_stats reports
  (routing/stats.py), set by the emulator when it loads (None before: nothing was copied).

This module is in the base layer and imports nothing of torch-fl: any layer may read and write its own part;
the modules that own a part keep their names for it (``activation.stack`` is ``process.activations``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ProcessState:
    """torch-fl's state of this process (see the module docstring for each part)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by `forget`; the parts' own locks guard their updates
        self.descriptions: dict[str, Any] | None = None  # name -> Description (None: not discovered yet)
        self.shadowed: dict[str, tuple[str, str]] = {}   # built-in names a file replaced -> (path, origin)
        self.backend: Any = None                         # device.Backend (None: not detected yet)
        self.emulator: Any = None                        # device.Emulator, the port routing sets
        self.emulated_type = ""                          # the borrowed slot's device type ('' = none)
        self.activations: list[Any] = []                 # activation.Activation, innermost last
        self.kernels: dict[str, list[Any]] = {}          # op -> table.KernelEntry (register_kernel)
        self.tables: dict[tuple, tuple[Any, Any]] = {}   # past activations' route tables
        self.activated = False                           # the process's device activated routing
        self.emulated: Any = None                        # routing.emu.slot's state, once loaded
        self.transfers: Callable[[], dict[str, int]] | None = None
        self.reset_transfers: Callable[[], None] | None = None

    def forget(self) -> None:
        """Forget what was detected and discovered (after FL_* variables changed): the backend, the
        descriptions and the route tables built from them. What is installed is the runtime object's to
        remove first (`Runtime.reset`); registered kernels and the emulated devices stay (PyTorch cannot
        unregister a backend)."""
        with self.lock:
            self.backend = None
            self.descriptions = None
            self.shadowed.clear()
            self.tables.clear()


process = ProcessState()
