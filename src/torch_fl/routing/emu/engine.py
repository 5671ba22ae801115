"""Backward passes on the emulated devices: on the calling thread.

PyTorch's autograd engine gives each device index its own ready queue and worker thread, sized once (at
the first backward of the process) from the device guard's ``deviceCount()``. A Python backend's guard
cannot say how many devices it has: PyTorch binds only ``type_()`` of ``torch._C._acc.DeviceGuard`` and
its C++ side answers 1. So the engine has one queue for PrivateUse1, and a backward that reaches a
tensor on ``emu:1`` stops at ``device_ready_queues_ ... INTERNAL ASSERT FAILED (autograd/engine.cpp)``.

With engine multithreading off (``torch.autograd.set_multithreading_enabled(False)``, a public switch),
the engine runs every node on the calling thread's CPU queue and never looks a device queue up. Once an
emulated device exists, every backward runs that way: the order of nodes follows the graph's dependencies
as before, and the gradients are the same. The device thread bought nothing on an emulated device (its
kernels run on the host, under the GIL) and cost two thread hand-offs per backward: a small backward
(``x.sum().backward()``) took 146 us of wall and 122 us of CPU on it, 76 us and 76 us on the calling
thread (benchmarks/emulated_backward.py); an op that fails in backward raises in the caller as on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.variable import Variable

from .slot import state

_Engine: Any = torch._C._ImperativeEngine


class Engine(_Engine):  # type: ignore[misc, valid-type]
    """PyTorch's engine handle (a subclass, so checks such as Dynamo's ``isinstance(value,
    torch._C._ImperativeEngine)`` still hold) whose ``run_backward`` runs on the calling thread once an
    emulated device exists."""

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        if not state.count or not torch._C._is_multithreading_enabled():
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
