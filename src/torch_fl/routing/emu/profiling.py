"""``torch.autograd.profiler.profile(use_device="npu")`` on the emulated device.

Without ``use_kineto=True`` PyTorch profiles a PrivateUse1 device in its "fallback" state, which times each op
with device events from the backend's C++ profiler stubs (``registerPrivateUse1Methods``). A Python backend
registers none, so every profiled op on the emulated device printed PyTorch's "Exception in RecordFunction
callback: kineto_ctx_ptr != nullptr INTERNAL ASSERT FAILED" (torch_npu's own tests profile this way:
test/trans_contiguous/*). The emulated device runs each op when it is called, on the host, so it has no device
events to time: its profile is Kineto's host trace (the state ``use_kineto=True`` selects, with the PrivateUse1
activity where Kineto has it), which is what those calls ask for here. Other devices keep PyTorch's profiler.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .slot import backend_name

_original_init: Any = None


def install() -> None:
    """Once per process: profiles of the emulated device take Kineto's state (no C++ stubs to time with)."""
    global _original_init
    if _original_init is not None:
        return
    profile = torch.autograd.profiler.profile
    _original_init = profile.__init__

    @functools.wraps(_original_init)
    def __init__(self: Any, *args: Any, use_device: str | None = None, use_kineto: bool = False,
                 **kwargs: Any) -> None:
        if use_device is not None and use_device == backend_name():
            use_kineto = True  # (the fallback state needs the backend's C++ event stubs)
        _original_init(self, *args, use_device=use_device, use_kineto=use_kineto, **kwargs)

    profile.__init__ = __init__
