"""``torch.Generator(device="emu")``: a generator of an emulated device."""

from __future__ import annotations

from typing import Any

import torch

from .slot import _no_device, backend_name, state


class _GeneratorMeta(type(torch.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _HostGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _HostGenerator)


_HostGenerator: Any = torch.Generator


class _EmuGenerator(torch.Generator):
    """A generator of an emulated device: the CPU generator algorithm (the data lives on the host),
    reporting its device as the emulated one."""

    _emu_device: torch.device

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self._emu_device


class Generator(torch.Generator, metaclass=_GeneratorMeta):
    """``torch.Generator`` once the emu backend is registered: ``torch.Generator(device="emu")`` gives
    an emulated device's generator (PyTorch's PrivateUse1 hooks cannot create one from Python); every
    other device gets PyTorch's own generator, and isinstance checks see PyTorch's class."""

    def __new__(cls, device: Any = "cpu") -> Any:  # type: ignore[misc]
        where = torch.device(device) if not isinstance(device, int) else torch.device(backend_name(), device)
        if where.type != backend_name():
            return _HostGenerator(where)
        index = state.current if where.index is None else where.index
        if index >= state.count:
            raise _no_device(index)
        return device_generator(index)


def device_generator(index: int) -> _EmuGenerator:
    """A new generator of emulated device `index`: a CPU generator (the device's data is on the host, so
    its draws equal a CPU generator's seeded alike) whose ``device`` is the emulated one."""
    generator = _EmuGenerator()
    generator._emu_device = torch.device(backend_name(), index)
    return generator


def _register_generator() -> None:
    torch.Generator = Generator  # type: ignore[misc]
