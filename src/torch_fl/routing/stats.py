"""Accounting of non-native calls per (op, dtype, route), the route log, and the dispatch logger."""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
from collections import Counter
from pathlib import Path

log = logging.getLogger("torch_fl.dispatch")
_counts: Counter[tuple[str, str, str]] = Counter()
_seconds: Counter[tuple[str, str, str]] = Counter()   # inclusive time per (op, dtype, route)
_top_level: Counter[str] = Counter()                  # time of outermost routed calls per route
_lock = threading.Lock()
_context: dict[str, str] = {"device": "", "description": ""}
_log_path: list[str] = []


def record(op: str, dtype: str | None, route: str, source: str) -> None:
    """Count one call; the first call of each (op, dtype, route) is logged at DEBUG with its source."""
    key = (op, dtype or "-", route)
    if key not in _counts:
        log.debug("%s [%s] -> %s (%s)", op, dtype or "-", route, source)
    _counts[key] += 1  # Counter updates are atomic enough under the GIL for statistics


def add_time(op: str, dtype: str | None, route: str, seconds: float, *, top_level: bool) -> None:
    _seconds[(op, dtype or "-", route)] += seconds
    if top_level:
        _top_level[route] += seconds


def routed_seconds() -> dict[str, float]:
    """Wall time spent in non-native routes, per route of the outermost call (nested translations are
    counted once, in their outermost call)."""
    return dict(_top_level)


class RouteStats(list):
    """The list of route_stats() records; ``stats["transfers"]`` (or ``.transfers``) adds the copies
    between host and emulated device and the syncs (see `transfers`)."""

    def __init__(self, records: list[dict[str, object]], transfers: dict[str, int]) -> None:
        super().__init__(records)
        self.transfers = transfers

    def __getitem__(self, key):  # type: ignore[override]
        if key == "transfers":
            return self.transfers
        return super().__getitem__(key)


def transfers() -> dict[str, int]:
    """Copies between host and emulated device (bytes and calls each way) and syncs (.item(), .cpu(),
    .tolist(), printing a device tensor) so far. Real devices are not counted (zeros): only an emulated
    device sees every copy without slowing it down."""
    emu = sys.modules.get("torch_fl.routing.emu")
    if emu is None:
        return {"h2d_bytes": 0, "h2d_calls": 0, "d2h_bytes": 0, "d2h_calls": 0, "syncs": 0}
    return emu.transfers()


def route_stats() -> RouteStats:
    """Non-native calls so far: [{'op', 'dtype', 'route', 'calls'}], most calls first; the copies and
    syncs of emulated devices are ``route_stats()["transfers"]``.

    Example:
        >>> import torch, torch_fl
        >>> torch.fl.route_stats()  # doctest: +SKIP
        [{'op': 'aten::gelu.default', 'dtype': 'float32', 'route': 'translate', 'calls': 12,
          'seconds': 0.0021}]

    `seconds` is inclusive wall time (a translation includes its sub-ops).
    """
    with _lock:
        items = list(_counts.items())
    return RouteStats([{"op": op, "dtype": dtype, "route": route, "calls": calls,
                        "seconds": round(_seconds.get((op, dtype, route), 0.0), 6)}
                       for (op, dtype, route), calls in sorted(items, key=lambda kv: (-kv[1], kv[0]))],
                      transfers())


def reset_route_stats() -> None:
    with _lock:
        _counts.clear()
        _seconds.clear()
        _top_level.clear()
    emu = sys.modules.get("torch_fl.routing.emu")
    if emu is not None:
        emu.reset_transfers()


def set_context(device: str, description: str) -> None:
    _context.update(device=device, description=description)


def route_log() -> dict[str, object]:
    stats = route_stats()
    return {**_context, "records": list(stats), "transfers": stats.transfers}


def write_route_log(path: str | Path) -> None:
    Path(path).write_text(json.dumps(route_log(), indent=2) + "\n", encoding="utf-8")


def write_at_exit(path: str) -> None:
    """Write the route log to `path` when the process exits (FL_ROUTE_LOG); registered once."""
    if not _log_path:
        atexit.register(_write_at_exit)
    # Absolute now: a script (or a test) that changes directory later must not move the log.
    _log_path.append(os.path.abspath(path))


def _write_at_exit() -> None:
    # FL_ROUTE_LOG's folder was checked when routing started; if the write still fails (folder removed,
    # disk full), the log goes to stderr instead of being lost behind a traceback at exit.
    path = _log_path[-1]
    try:
        write_route_log(path)
    except OSError as exc:
        import sys

        print(f"torch-fl: could not write the route log to {path} (FL_ROUTE_LOG): {exc.strerror or exc}; "
              f"here it is instead:\n{json.dumps(route_log(), indent=2)}", file=sys.stderr)
