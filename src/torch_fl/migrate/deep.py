"""Deeply nested but valid Python: CPython compiles `f(f(f(...)))` 199 calls deep, `1 if a else ...`
chains, `"s" "s" ...` of thousands of parts and `a.b.b.b...` of thousands of attributes, while a
recursive walk over such a tree (ours over ``ast``, libcst's over its tree) needs several Python frames
per level and hits the default recursion limit of 1,000.

:func:`call_deep` runs a function as usual and, only when it raises RecursionError, runs it again on a
thread with a large stack and a high recursion limit: normal files pay nothing, deep ones still get
their findings and fixes instead of ending a tree run with "internal error: RecursionError". The
function must be safe to run twice (build its state inside, not outside).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DEEP_RECURSION_LIMIT", "DEEP_STACK_BYTES", "call_deep"]

T = TypeVar("T")

# Python frames allowed on the deep thread, and its C stack (reserved, committed only as used).
DEEP_RECURSION_LIMIT = 200_000
DEEP_STACK_BYTES = 1 << 30
_LOCK = threading.Lock()  # the recursion limit and the next thread's stack size are process-wide


def call_deep(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`; on RecursionError, once more on a thread with a 1 GiB stack and a
    recursion limit of 200,000. A RecursionError there too propagates (input nested past any sense)."""
    try:
        return fn(*args, **kwargs)
    except RecursionError:
        pass
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    with _LOCK:
        limit = sys.getrecursionlimit()
        size = threading.stack_size()
        try:
            threading.stack_size(DEEP_STACK_BYTES)
            sys.setrecursionlimit(max(limit, DEEP_RECURSION_LIMIT))
            thread = threading.Thread(target=run, name="torchfl-deep", daemon=True)
            thread.start()
        finally:
            threading.stack_size(size)
        try:
            thread.join()
        finally:
            sys.setrecursionlimit(limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
