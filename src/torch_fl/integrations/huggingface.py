"""HF accelerate's ``Accelerator()`` and transformers' ``Trainer`` on torch.fl.device().

Both choose their device in accelerate's ``PartialState``, whose own setting for it is the environment
variable ``ACCELERATE_TORCH_DEVICE`` (read once, when the first ``PartialState``/``Accelerator``/
``TrainingArguments.device`` is created). Without it accelerate tries MPS, MLU, MUSA, NPU, HPU, CUDA,
XPU and then the CPU: an emulated chip (``FL_DEVICE=emu:cuda``) or a virtual id mapped by
``FL_DEVICE_MAP`` is never among them, so the run silently trains on the CPU. From accelerate 1.16 it takes
``torch.accelerator.current_accelerator()`` instead (the emulated device, without an index; a mapped
virtual id is still not among them), so the variable is still what names the device.

:func:`use_fl_device` resolves torch.fl.device() (registering an emulated chip's device type, which
``torch.device("emu:0")`` needs) and sets that variable. This module imports neither framework.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

import torch_fl  # noqa: F401  (binds torch.fl)

__all__ = ["ENV", "use_fl_device"]

ENV = "ACCELERATE_TORCH_DEVICE"


def _state_device() -> torch.device | None:
    """The device of an accelerate state created already in this process (None: none yet)."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None)
    return shared.get("device") if shared else None


def use_fl_device(device: Any = None) -> torch.device:
    """Make accelerate's ``Accelerator()`` and transformers' ``Trainer`` use torch.fl.device().

    Call it before the first ``Accelerator()``, ``PartialState()`` or ``TrainingArguments(...).device``.

    Args:
        device: a torch-fl device spec ("acc1", "emu:0"); default torch.fl.device() (FL_DEVICE).

    Returns:
        The torch.device both frameworks will use.

    Raises:
        RuntimeError: when accelerate already chose another device in this process.

    Example:
        >>> from torch_fl.integrations.huggingface import use_fl_device
        >>> use_fl_device("cpu")
        device(type='cpu')
    """
    dev = torch.fl.device(device)
    chosen = _state_device()
    if chosen is not None and torch.device(chosen) != dev:
        raise RuntimeError(
            f"use_fl_device({device!r}): accelerate already chose {chosen} for this process (an Accelerator, "
            f"PartialState or TrainingArguments.device was created first) and keeps it. Call use_fl_device() "
            f"before any of them, or set {ENV}={dev} in the environment before the process starts.")
    os.environ[ENV] = str(dev)
    return dev
