"""Hugging Face hub kernels on the emulated chip: off, each layer runs its PyTorch forward.

transformers (5.x) turns on the ``kernels`` package in every ``from_pretrained`` unless the environment
variable ``USE_HUB_KERNELS`` says no: ``kernelize()`` then swaps layers (RMSNorm, MoE, attention) for
binaries built for the real chip, fetched from the Hub. An emulated chip computes on the host, where those
binaries cannot run, and ``kernels`` refuses the device type ``emu`` outright ("Unsupported device type
'emu'"), so ``from_pretrained(..., device_map=<emulated device>)`` stopped on emu:cuda and emu:xpu before the
first step. The emulated chip therefore runs what ``kernels`` itself runs where no kernel fits a layer
(its fallback): the layer's own PyTorch forward. That is the setting ``USE_HUB_KERNELS=0`` asks for; it is
set for this process (and its workers) when emulation starts, unless the user set the variable, and said
once in the log. A user who sets ``USE_HUB_KERNELS=1`` under emulation gets transformers' and kernels' own
behaviour, their error included.
"""

from __future__ import annotations

import logging
import os

ENV = "USE_HUB_KERNELS"
_log = logging.getLogger("torch_fl.routing")


def install(device_type: str) -> bool:
    """Turn hub kernels off for this process unless the user chose; True if this call turned them off."""
    if ENV in os.environ:
        return False
    os.environ[ENV] = "0"
    _log.info("hub kernels are off on the emulated device '%s' (%s=0): they are binaries for the real chip; "
              "each layer runs its PyTorch forward, as the kernels package does where no kernel fits. "
              "Set %s=1 to keep transformers' default.", device_type, ENV, ENV)
    return True
