"""Leave a Python mode (TorchFunctionMode, TorchDispatchMode) without leaving a deadlock behind.

Work that PyTorch runs on its own C++ threads copies the calling thread's state, Python mode stacks
included: a gloo collective's ``AsyncWork`` holds an ``at::ThreadLocalState`` with a reference to every
mode on the stack. While the mode is still on the stack that reference is not the last one; once the mode
has exited, the worker thread that drops the finished work drops the last one and must take the GIL to
do it. If the main thread is meanwhile in ``~ProcessGroupGloo`` (a DDP model or process group freed, which
joins the worker threads while holding the GIL), neither can go on and no Python-level timeout can fire.
tests/test_mode_exit.py shows the copy outliving the exit (two gloo ranks in one process, the peer late).
The same destructor also deadlocks without any mode (a DDP model freed after destroy_process_group(),
reproduced in plain PyTorch): that one only the caller's order avoids, and the tests free the model first.

`EnteredMode.exit` exits the mode and then waits, with the GIL released, until no C++ copy of it is left
(the mode's reference count says so: each live stack entry, copied or not, holds one reference), for at
most `timeout_s`: long enough for a worker to finish (microseconds to milliseconds), short enough not to
matter when the user still holds an async work handle, whose last reference then goes on this thread,
where it is harmless.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

_log = logging.getLogger("torch_fl.distributed")

#: How long `EnteredMode.exit` waits for PyTorch's worker threads to drop their copies of the mode.
RELEASE_TIMEOUT_S = 0.5


class EnteredMode:
    """A mode made and entered here (it is on this thread's stack), to leave with `exit`. Made here, so
    that no reference but this object's is counted: the references at `exit` beyond those at the start
    are the C++ copies of its stack entries."""

    def __init__(self, make: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.mode = mode = make(*args, **kwargs)
        self._base = sys.getrefcount(mode)  # this attribute, the local and the argument (as in `exit`)
        mode.__enter__()

    def on_top(self) -> bool:
        """Whether the mode is the innermost of its kind on this thread (the only one `exit` may pop)."""
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        stack = (_get_current_dispatch_mode_stack() if hasattr(self.mode, "__torch_dispatch__")
                 else _get_current_function_mode_stack())
        return bool(stack) and stack[-1] is self.mode

    def exit(self, timeout_s: float = RELEASE_TIMEOUT_S) -> None:
        """Exit the mode, then wait until no C++ work holds a copy of it (at most `timeout_s`). Every
        stack entry holds one reference, copied or not, the mode's re-push around each of its own calls
        (torch.overrides pops and pushes it again) included. The caller must hold no reference of its
        own beyond this object's (a list of the mode stack, say): it would be waited for."""
        mode = self.mode
        mode.__exit__(None, None, None)
        deadline, pause = time.monotonic() + timeout_s, 0.001
        while sys.getrefcount(mode) > self._base:
            if time.monotonic() >= deadline:
                _log.debug("%s: C++ work still holds the exited mode after %.1f s (an async work handle kept "
                           "by the caller, most likely); it is released where that handle is",
                           type(mode).__name__, timeout_s)
                return
            # Sleeping releases the GIL so that the worker holding a copy can drop it; pauses that grow
            # (to 50 ms) let a worker that a loaded machine schedules late win the GIL at all.
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


@contextlib.contextmanager
def entered(make: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``with entered(Mode, ...):`` is ``with Mode(...):`` with the exit of `EnteredMode.exit`."""
    handle = EnteredMode(make, *args, **kwargs)
    try:
        yield handle.mode
    finally:
        handle.exit()
