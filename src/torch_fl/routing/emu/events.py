"""``torch.Event(device=<emulated device>)``: an event of the emulated device.

PyTorch's device-generic ``torch.Event`` asks the backend's C++ device guard to synchronize events and time
them; a Python backend can only define the guard's ``type_()`` (torch 2.13), so ``synchronize()`` stopped
with "Backend doesn't support synchronizing events" and ``elapsed_time()`` with "doesn't support
elapsedTime" while ``torch.npu.Event`` worked. Once the emulated backend is registered, ``torch.Event``
answers an emulated device with the device module's own event (``torch.<chip>.Event``, module.py) that
also carries ``device``; any other device gets PyTorch's event, and isinstance checks see PyTorch's class.
"""

from __future__ import annotations

from typing import Any

import torch

from .slot import _no_device, backend_name, state

_HostEvent: Any = torch.Event


class _EventMeta(type(torch.Event)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, (_HostEvent, _DeviceEvent))

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, (_HostEvent, _DeviceEvent))


class _DeviceEvent:
    """Marker base of the emulated device's events made through ``torch.Event``."""


def _device_event(where: torch.device, enable_timing: bool, blocking: bool, interprocess: bool) -> Any:

    index = state.current if where.index is None else where.index
    if index >= state.count:
        raise _no_device(index)
    event = _EmuEvent(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
    event.device = torch.device(backend_name(), index)
    event.event_id = id(event)
    return event


class Event(torch.Event, metaclass=_EventMeta):
    """``torch.Event`` once the emulated backend is registered (see the module docstring)."""

    def __new__(cls, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Any:  # type: ignore[misc]
        if device is None:
            accelerator = torch.accelerator.current_accelerator()
            where = accelerator if accelerator is not None else torch.device("cpu")
        else:
            where = torch.device(device) if not isinstance(device, int) else torch.device(backend_name(), device)
        if where.type == backend_name():
            return _device_event(where, enable_timing, blocking, interprocess)
        return _HostEvent(where, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


_EmuEvent: Any = None


def register() -> None:
    """Once, with the backend: ``torch.Event`` answers the emulated device (PyTorch's own class stays
    reachable for every other device)."""
    global _EmuEvent
    from .module import _BackendModule

    _EmuEvent = type("Event", (_BackendModule.Event, _DeviceEvent), {"__module__": __name__})
    torch.Event = Event  # type: ignore[misc]
