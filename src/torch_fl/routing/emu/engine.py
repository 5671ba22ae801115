"""Backward passes across several emulated devices.

PyTorch's autograd engine gives each device index its own ready queue and worker thread, sized once (at
the first backward of the process) from the device guard's ``deviceCount()``. A Python backend's guard
cannot say how many devices it has: PyTorch binds only ``type_()`` of ``torch._C._acc.DeviceGuard`` and
its C++ side answers 1. So the engine has one queue for PrivateUse1, and a backward that reaches a
tensor on ``emu:1`` stops at ``device_ready_queues_ ... INTERNAL ASSERT FAILED (autograd/engine.cpp)``.

With engine multithreading off (``torch.autograd.set_multithreading_enabled(False)``, a public switch),
the engine runs every node on the calling thread's CPU queue and never looks a device queue up. While
more than one emulated device exists, every backward runs that way: the order of nodes follows the
graph's dependencies as before, and the gradients are the same. (One device keeps the engine's device
thread, as before.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.variable import Variable

from .slot import state

_Engine: Any = torch._C._ImperativeEngine


class Engine(_Engine):  # type: ignore[misc, valid-type]
    """PyTorch's engine handle (a subclass, so checks such as Dynamo's ``isinstance(value,
    torch._C._ImperativeEngine)`` still hold) whose ``run_backward`` runs on the calling thread while
    several emulated devices exist."""

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        if state.count < 2 or not torch._C._is_multithreading_enabled():
            return super().run_backward(*args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return super().run_backward(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)


def install() -> None:
    """Swap PyTorch's engine handle for `Engine` (once): ``torch.autograd.backward``, ``.grad`` and
    ``Tensor.backward`` all call ``Variable._execution_engine.run_backward``; the engine itself is one
    C++ object, which both handles reach."""
    if not isinstance(Variable._execution_engine, Engine):
        Variable._execution_engine = Engine()
