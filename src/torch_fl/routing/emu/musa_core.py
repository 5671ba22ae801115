"""``torch_musa.core._utils`` of the emulated plugin: what torch_musa's own test framework imports.

MooreThreads/torch_musa torch_musa/testing/common_utils.py starts with
``from torch_musa.core._utils import _get_musa_arch`` (every test file of the vendor imports that framework), and
gates tests on the arch it returns (21 for QY1, 22 for QY2, 31 ...). The vendor computes it as
``major * 10 + minor`` of ``get_device_properties(0)`` unless ``TORCH_MUSA_ARCH`` names one; the emulated
chip's capability comes from its description (``identity.capability``), so the same rule gives its arch.
"""

from __future__ import annotations

import os
from typing import Any

import torch

_ARCHES = (21, 22, 31)  # what the vendor's TORCH_MUSA_ARCH check accepts


def _get_musa_arch() -> int:
    """The MUSA arch number (22 for QY2, the S4000), as torch_musa computes it."""
    chosen = os.environ.get("TORCH_MUSA_ARCH")
    if chosen is not None:
        try:
            arch = int(chosen)
        except ValueError:
            arch = -1
        if arch not in _ARCHES:
            raise ValueError(f"TORCH_MUSA_ARCH={chosen!r} should be one of {', '.join(map(str, _ARCHES))} (torch_musa's "
                             f"accepted arch numbers); unset it to take the emulated chip's own")
        return arch
    properties = torch.musa.get_device_properties(0)  # type: ignore[attr-defined]
    return int(properties.major * 10 + properties.minor)


def _get_musa_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of a MUSA device given as an int, a str or a torch.device (torch_musa's helper)."""
    from torch._utils import _get_device_index

    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "musa":
            raise ValueError(f"Expected a musa or cpu device, but got: {device}")
        if device.index is None and optional:
            return torch.musa.current_device()  # type: ignore[attr-defined]
    return _get_device_index(device, optional, allow_cpu)


__all__ = ["_get_musa_arch", "_get_musa_device_index"]
