"""``torch.Event(device=<emulated device>)``: an event of the emulated device.

PyTorch's device-generic ``torch.Event`` asks the backend's C++ device guard to synchronize events and time
them; a Python backend can only define the guard's ``type_()`` (torch 2.13), so ``synchronize()`` stopped
with "Backend doesn't support synchronizing events" and ``elapsed_time()`` with "doesn't support
elapsedTime" while ``torch.npu.Event`` worked. Once the emulated backend is registered, ``torch.Event``
answers an emulated device with the device's own event (``torch.<chip>.Event``, streams.py): a subclass of
PyTorch's event with a valid C++ payload, so a C++ call handed one reads a real event (a plain Python
object there was read as a C++ event: "Unknown device: <random>"); any other device gets PyTorch's event,
and isinstance checks see PyTorch's class.
"""

from __future__ import annotations

from typing import Any

import torch

from . import streams

_HostEvent: Any = torch.Event


class _EventMeta(type(torch.Event)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _HostEvent)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _HostEvent)


class Event(torch.Event, metaclass=_EventMeta):
    """``torch.Event`` once the emulated backend is registered (see the module docstring)."""

    def __new__(cls, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> Any:  # type: ignore[misc]
        if device is None:
            accelerator = torch.accelerator.current_accelerator()
            where = accelerator if accelerator is not None else torch.device("cpu")
        else:
            where = torch.device(device) if not isinstance(device, int) else torch.device(streams.backend_name(), device)
        if where.type == streams.backend_name():
            return streams.Event(enable_timing, blocking, interprocess, device=where)
        return _HostEvent(where, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)



def register() -> None:
    """Once, with the backend: ``torch.Event`` answers the emulated device (PyTorch's own class stays
    reachable for every other device)."""
    torch.Event = Event  # type: ignore[misc]
