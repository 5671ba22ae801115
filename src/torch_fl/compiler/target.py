"""Which description's [compile] options apply."""

from __future__ import annotations

import torch

from ..description.model import Description


def description_of(device: str | torch.device | None = None) -> Description:
    """For ``emu:NAME``, that chip's description; with no device, the description routing is active
    for (resolving the default device activates it); otherwise the description of that device."""
    from .. import routing
    from ..description import registry
    from ..device import EMULATION_PREFIX, description_for, resolve

    if isinstance(device, str) and device.strip().startswith(EMULATION_PREFIX):
        return registry.get(device.strip()[len(EMULATION_PREFIX):])
    dev = resolve(device)
    active = routing.active()
    if device is None and active is not None:
        return active.description
    return description_for(dev)
