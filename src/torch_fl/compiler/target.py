"""Which description's [compile] options apply."""

from __future__ import annotations

import torch

from ..description.model import Description


def description_of(device: str | torch.device | None = None) -> Description:
    """For ``emu:NAME``, that chip's description; with no device, the description routing is active
    for (resolving the default device activates it); otherwise the description of that device."""
    from .. import routing
    from ..device import governing
    from ..routing.current import use_device

    if device is None:
        use_device()  # the default device activates routing
        active = routing.active()
        if active is not None:
            return active.description
    return governing(device)
