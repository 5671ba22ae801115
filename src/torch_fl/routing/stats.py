"""Accounting of non-native calls per (op, dtype, route), the route log, and the dispatch logger.

The route log at exit (FL_ROUTE_LOG) merges: processes that share one path (the ranks of a torchrun job,
DataLoader workers that route, two scripts run side by side) each add their counts under a file lock
(read, add, write to a temporary file, rename), so no process's records are lost. A log written before
this process started (a previous run) is replaced, not added to.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _toml
from .._names import RouteKind
from .._state import process
from ..errors import RouteLogError

log = logging.getLogger("torch_fl.dispatch")
_counts: Counter[tuple[str, str, RouteKind]] = Counter()
_seconds: Counter[tuple[str, str, RouteKind]] = Counter()   # inclusive time per (op, dtype, route)
_top_level: Counter[RouteKind] = Counter()                  # time of outermost routed calls per route
_lock = threading.Lock()
_context: dict[str, str] = {"device": "", "description": ""}
_log_path: list[str] = []
_STARTED = time.time()  # a route log written after this is a concurrent writer's: merged, not replaced
_LOCK_TIMEOUT_S = 60.0  # a writer holds the lock for milliseconds


def record(op: str, dtype: str | None, route: RouteKind, source: str) -> None:
    """Count one call; the first call of each (op, dtype, route) is logged at DEBUG with its source."""
    key = (op, dtype or "-", route)
    if key not in _counts:
        log.debug("%s [%s] -> %s (%s)", op, dtype or "-", route, source)
    _counts[key] += 1  # Counter updates are atomic enough under the GIL for statistics


def add_time(op: str, dtype: str | None, route: RouteKind, seconds: float, *, top_level: bool) -> None:
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
    .tolist(), printing a device tensor) so far, and the optimizer steps they span (`steps`: syncs per step
    is syncs / steps; bench, grade and profile name the source lines). Real devices are not counted (zeros):
    only an emulated device sees every copy without slowing it down."""
    read = process.transfers  # (set when the emulator loads)
    if read is None:
        return {"h2d_bytes": 0, "h2d_calls": 0, "d2h_bytes": 0, "d2h_calls": 0, "syncs": 0, "steps": 0}
    return read()


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
    if process.reset_transfers is not None:
        process.reset_transfers()


def set_context(device: str, description: str) -> None:
    _context.update(device=device, description=description)


def route_log() -> dict[str, object]:
    stats = route_stats()
    return {**_context, "records": list(stats), "transfers": stats.transfers}


def write_route_log(path: str | Path, *, merge: bool = False) -> None:
    """Write the route log to `path` (atomically: a reader never sees half a file). With `merge`, add
    this process's counts to a log another running process wrote there (see the module docstring)."""
    path = Path(path)
    data: dict[str, object] = {**route_log(), "processes": 1, "written": time.time()}
    if not merge:
        _replace(path, data)
        return
    with _locked(path):
        existing = _read_log(path)
        if existing is not None and float(existing.get("written", 0) or 0) >= _STARTED:
            data = merge_logs(existing, data)
        _replace(path, data)


def merge_logs(first: dict, second: dict) -> dict[str, object]:
    """Two route logs as one: calls and seconds added per (op, dtype, route), transfers per counter."""
    totals: dict[tuple[str, str, str], dict[str, object]] = {}
    for record in [*first.get("records", []), *second.get("records", [])]:
        key = (record["op"], record["dtype"], record["route"])
        into = totals.setdefault(key, {"op": key[0], "dtype": key[1], "route": key[2], "calls": 0,
                                       "seconds": 0.0})
        into["calls"] += int(record.get("calls", 0))  # type: ignore[operator]
        into["seconds"] = round(into["seconds"] + float(record.get("seconds", 0.0)), 6)  # type: ignore[operator]
    transfers = Counter(first.get("transfers") or {})
    transfers.update(second.get("transfers") or {})
    context = {name: " + ".join(dict.fromkeys(v for v in (first.get(name), second.get(name)) if v))
               for name in ("device", "description")}
    records = sorted(totals.values(), key=lambda r: (-r["calls"], r["op"], r["dtype"], r["route"]))  # type: ignore[operator]
    return {**context, "records": records, "transfers": dict(transfers),
            "processes": int(first.get("processes", 1)) + int(second.get("processes", 1)),
            "written": second.get("written", time.time())}


def _read_log(path: Path) -> dict | None:
    from .. import _toml

    try:
        data = json.loads(_toml.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # no log yet, or not one (a torn, foreign or crafted file is replaced)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        return None
    try:
        merge_logs(data, {})  # every record has the fields the merge adds
    except (KeyError, TypeError, ValueError):
        return None
    return data


def _replace(path: Path, data: dict[str, object]) -> None:
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2) + "\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on PATH.lock (the kernel drops it if the holder dies); no lock on Windows."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        deadline = time.monotonic() + _LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(f"the route log lock {path}.lock is held by another process for more than "
                                  f"{_LOCK_TIMEOUT_S:.0f} s") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


def write_at_exit(path: str) -> None:
    """Write the route log to `path` when the process exits (FL_ROUTE_LOG), merged with the logs of the
    other processes writing there; registered once."""
    if not _log_path:
        atexit.register(_write_at_exit)
    # Absolute now: a script (or a test) that changes directory later must not move the log.
    _log_path.append(os.path.abspath(path))


def _write_at_exit() -> None:
    # FL_ROUTE_LOG's folder was checked when routing started; if the write still fails (folder removed,
    # disk full), the log goes to stderr instead of being lost behind a traceback at exit.
    if not _log_path:  # withdrawn since it was registered
        return
    path = _log_path[-1]
    try:
        write_route_log(path, merge=True)
    except OSError as exc:
        print(f"torch-fl: could not write the route log to {path} (FL_ROUTE_LOG): {exc.strerror or exc}; "
              f"here it is instead:\n{json.dumps(route_log(), indent=2)}", file=sys.stderr)


# Reading a route log (torchfl routes diff): every problem names the file and the expected shape.
ROUTE_LOG_SHAPE = ('a route log as written with FL_ROUTE_LOG=PATH or torch.fl.write_route_log(PATH): '
             '{"device": "...", "description": "...", "records": [{"op": "aten::gelu.default", '
             '"dtype": "float32", "route": "translate", "calls": 12}, ...]}')

Key = tuple[str, str]  # (op, dtype)


@dataclass
class RouteLog:
    path: str
    device: str = ""
    description: str = ""
    calls: dict[Key, dict[str, int]] = field(default_factory=dict)  # (op, dtype) -> {route: calls}

    @property
    def records(self) -> int:
        return sum(len(routes) for routes in self.calls.values())


def read_route_log(path: str | Path) -> RouteLog:
    """Read and check a route log; every problem names the file and the expected shape."""
    path = str(path)
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise RouteLogError(f"{path}: not a route log (no 'records' list); expected {ROUTE_LOG_SHAPE}")
    log = RouteLog(path, _text(data, "device", path), _text(data, "description", path))
    for index, record in enumerate(data["records"]):
        op, dtype, route, calls = _checked_record(record, f"{path}: records[{index}]")
        routes = log.calls.setdefault((op, dtype), {})
        routes[route] = routes.get(route, 0) + calls  # a log merged by hand may repeat a record
    return log


def _load_json(path: str) -> Any:
    try:
        text = _toml.read_bytes(path).decode("utf-8")  # a regular file only: a FIFO or /dev/zero never ends
    except FileNotFoundError:
        raise RouteLogError(f"{path}: no such file; expected {ROUTE_LOG_SHAPE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RouteLogError(f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RouteLogError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                       f"expected {ROUTE_LOG_SHAPE}") from None
    except RecursionError:
        raise RouteLogError(f"{path}: not a route log: its JSON is nested too deeply to read (a route log is "
                       f"two levels deep); expected {ROUTE_LOG_SHAPE}") from None


def _text(data: dict[str, Any], key: str, path: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise RouteLogError(f"{path}: '{key}' is {type(value).__name__}, not a string; expected {ROUTE_LOG_SHAPE}")
    return value


def _checked_record(record: Any, where: str) -> tuple[str, str, str, int]:
    if not isinstance(record, dict):
        raise RouteLogError(f"{where} is {type(record).__name__}, not an object; expected {ROUTE_LOG_SHAPE}")
    for key in ("op", "route"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise RouteLogError(f"{where}: '{key}' must be a non-empty string, not {record.get(key)!r}; "
                           f"expected {ROUTE_LOG_SHAPE}")
    dtype = record.get("dtype")
    if dtype is not None and not isinstance(dtype, str):
        raise RouteLogError(f"{where}: 'dtype' must be a string or null, not {dtype!r}; expected {ROUTE_LOG_SHAPE}")
    calls = record.get("calls")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 0:
        raise RouteLogError(f"{where}: 'calls' must be a non-negative integer, not {calls!r}; "
                       f"expected {ROUTE_LOG_SHAPE}")
    return record["op"], dtype or "-", record["route"], calls


# Comparing two logs (`torchfl routes diff` prints it) ------------------------------------------------
CHANGES = ("route", "added", "removed", "calls")  # the kinds of change, in the order of the diff table


def diff_route_logs(before: RouteLog, after: RouteLog, *, ignore_calls: bool = False) -> list[dict[str, Any]]:
    """Changes from `before` to `after`, table order: [{'change', 'op', 'dtype', 'before', 'after'}]."""
    changes = []
    for key in sorted(before.calls.keys() | after.calls.keys()):
        old, new = before.calls.get(key, {}), after.calls.get(key, {})
        change = _classify(old, new, ignore_calls)
        if change:
            changes.append({"change": change, "op": key[0], "dtype": key[1], "before": old, "after": new})
    return sorted(changes, key=lambda c: CHANGES.index(c["change"]))  # stable: op order within a kind


def _classify(old: dict[str, int], new: dict[str, int], ignore_calls: bool) -> str | None:
    if not old:
        return "added"
    if not new:
        return "removed"
    if set(old) != set(new):
        return "route"
    return None if ignore_calls or old == new else "calls"
