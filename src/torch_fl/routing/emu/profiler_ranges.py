"""``torch.mlu.cnpx`` (Cambricon's CNPX, the counterpart of ``torch.cuda.nvtx``) on an emulated chip.

CNPX ranges and marks annotate a run for the vendor's profiler. The emulated chip's profiler is Kineto's host
trace (profiling.py), so a range is a ``record_function`` range there: ``range_push``/``range_pop`` nest per
thread and return the depth, ``range_start``/``range_end`` pair by handle across threads, ``mark`` is an instant
(an empty range), and ``range(msg)`` is a context manager. Outside a profile they cost a function call each.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import torch

_local = threading.local()
_open: dict[int, Any] = {}
_handles = itertools.count(1)
_lock = threading.Lock()


def _stack() -> list[Any]:
    found = getattr(_local, "stack", None)
    if found is None:
        found = _local.stack = []
    return found


def range_push(msg: str) -> int:
    """Open a nested range; returns the depth (0-based) of the new range."""
    stack = _stack()
    record = torch.autograd.profiler.record_function(str(msg))
    record.__enter__()
    stack.append(record)
    return len(stack) - 1


def range_pop() -> int:
    """Close the innermost range of this thread; returns the depth it had, -1 when none is open."""
    stack = _stack()
    if not stack:
        return -1
    stack.pop().__exit__(None, None, None)
    return len(stack)


def range_start(msg: str) -> int:
    """Open a range that any thread may end; returns its handle."""
    record = torch.autograd.profiler.record_function(str(msg))
    record.__enter__()
    with _lock:
        handle = next(_handles)
        _open[handle] = record
    return handle


def range_end(range_id: int) -> None:
    with _lock:
        record = _open.pop(int(range_id), None)
    if record is not None:
        record.__exit__(None, None, None)


def mark(msg: str) -> None:
    """An instant event: an empty range named `msg`."""
    with torch.autograd.profiler.record_function(str(msg)):
        pass


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:  # (the vendor's name)
    range_push(str(msg).format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
