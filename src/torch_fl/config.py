"""Project and user config files: this module finds and reads them; the settings layer
(``torch_fl._env``) checks their keys and parses their values with the parsers the environment uses.

Project file: the nearest ``torch_fl.toml`` (or a ``[tool.torch_fl]`` table in the nearest
``pyproject.toml``) found walking up from the current directory. User file: ``FL_CONFIG`` (which must
exist when set), else ``$XDG_CONFIG_HOME/torch_fl/config.toml`` (``~/.config/torch_fl/config.toml``).

Keys (all optional; each is the config key of an ``FL_*`` variable, docs/env.md lists them all)::

    device = "acc0"                      # FL_DEVICE: default device for torch.fl.device()
    backend = "cuda"                     # FL_BACKEND: force a description instead of auto-detection
    device_map = { acc0 = "cuda:1", acc1 = "cpu" }   # FL_DEVICE_MAP
    log = "dispatch=DEBUG"               # FL_LOG (applied at import, like the variable)
    fallback = "error"                   # FL_FALLBACK
    cache_keep = 3                       # FL_CACHE_KEEP

    [routes]                             # FL_ROUTE: per-op routes
    "aten::gelu" = "translate"

    [scan]                               # `torchfl scan` / `torchfl fix` (pyproject: [tool.torch_fl.scan])
    select = ["FL1", "FL2"]              # replaces the default rules (the coupling rules)
    extend-select = ["FL203"]            # adds to them (performance hints are opt-in)
    ignore = ["FL401"]
    extend-exclude = ["third_party/*"]

The scan table is read by :func:`load_scan_config`, which stays free of torch imports (``torchfl scan``
runs in hook environments without torch). The old ``[tool.torchfl]`` table (the scan keys at its top
level) is still read, with a deprecation message.
"""

from __future__ import annotations

import os
from pathlib import Path
from stat import S_ISREG
from typing import Any, NamedTuple

from .errors import ConfigError, ScanConfigError, did_you_mean


class ConfigFile(NamedTuple):
    # A NamedTuple, not a dataclass: `torchfl scan` reads this module, and dataclasses import inspect.
    path: Path | None
    values: dict[str, Any] = {}  # noqa: RUF012  (never mutated: ConfigFile(None) reads as empty)

    def get(self, key: str) -> Any:
        return self.values.get(key)


_NO_FILE = ConfigFile(None)
# Parsed files by (path, table) with their (size, mtime): the settings layer asks for a file on every
# lookup (torch_fl.emulate() reads pyproject.toml's [tool.torch_fl] four times, ~0.5 ms a parse).
_CACHE: dict[tuple[str, str | None], tuple[tuple[int, int], ConfigFile]] = {}
# The files a project config can be, nearest first in each folder: torch_fl.toml, then pyproject.toml's
# [tool.torch_fl] table (a pyproject.toml without one does not end the walk).
_PROJECT_FILES = (("torch_fl.toml", None), ("pyproject.toml", "torch_fl"))


def _read(path: str | os.PathLike[str], table: str | None = None,
          stat: os.stat_result | None = None) -> ConfigFile:
    from . import _toml  # here, not at the top: `torchfl scan` without a config file never needs it

    name = os.fspath(path)
    try:
        stat = stat or os.stat(name)
        stamp = (stat.st_size, stat.st_mtime_ns)
        cached = _CACHE.get((name, table))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        data = _toml.loads(_toml.read_text(Path(name)))
    except (OSError, ValueError, RecursionError, MemoryError) as exc:  # TOMLDecodeError is a ValueError
        raise ConfigError(f"{name}: cannot read the torch-fl config: {exc}") from None
    if table:
        tool = data.get("tool", {})
        data = tool.get(table) if isinstance(tool, dict) else None
        if data is None:
            found = ConfigFile(None)
            _CACHE[(name, table)] = (stamp, found)
            return found
        if not isinstance(data, dict):
            raise ConfigError(f"{name}: [tool.{table}] must be a table")
    found = ConfigFile(Path(name), data)
    _CACHE[(name, table)] = (stamp, found)
    return found


def _regular_file(path: str) -> os.stat_result | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info if S_ISREG(info.st_mode) else None


# The last walk up from the current directory: the directory it started in, the mtime of every folder it
# looked in and the stamp of every candidate file it saw. A folder's mtime changes when an entry is added,
# removed or renamed in it (an editor's atomic save included) and a file's stamp when it is written in place,
# so a repeated lookup re-stats those instead of walking: torch.fl.device() asks four times a call.
_WALK: tuple[str, tuple[tuple[str, int], ...], tuple[tuple[str, tuple[int, int]], ...], ConfigFile] | None = None


def _walk_unchanged(folders: tuple[tuple[str, int], ...], files: tuple[tuple[str, tuple[int, int]], ...]) -> bool:
    try:
        for folder, mtime in folders:
            if os.stat(folder).st_mtime_ns != mtime:
                return False
        for path, stamp in files:
            info = os.stat(path)
            if (info.st_size, info.st_mtime_ns) != stamp:
                return False
    except OSError:
        return False
    return True


def project_config(start: Path | None = None) -> ConfigFile:
    """The nearest project config above `start` (default: the current directory). String paths and one
    stat per candidate: every setting looks (four times per torch.fl.device() call), and pathlib's
    objects cost ~25 us a lookup; from the current directory a repeated lookup only re-stats (_WALK)."""
    global _WALK
    cwd = os.getcwd() if start is None else None
    if cwd is not None and _WALK is not None and _WALK[0] == cwd and _walk_unchanged(_WALK[1], _WALK[2]):
        return _WALK[3]
    here = os.path.realpath(os.fspath(start) if start is not None else cwd)
    folders: list[tuple[str, int]] = []
    files: list[tuple[str, tuple[int, int]]] = []
    found = ConfigFile(None)
    while True:
        try:
            folders.append((here, os.stat(here).st_mtime_ns))
        except OSError:
            folders.append((here, -1))
        for name, table in _PROJECT_FILES:
            candidate = os.path.join(here, name)
            info = _regular_file(candidate)
            if info is not None:
                files.append((candidate, (info.st_size, info.st_mtime_ns)))
                found = _read(candidate, table, info)
                if found.path is not None:
                    break
        parent = os.path.dirname(here)
        if found.path is not None or parent == here:
            break
        here = parent
    if cwd is not None:
        _WALK = (cwd, tuple(folders), tuple(files), found)
    return found


def _user_config_file(explicit: Path | None) -> str:
    if explicit is not None:
        return os.fspath(explicit)
    environ = os.environ
    base = environ.get("XDG_CONFIG_HOME") or (environ.get("HOME") or os.path.expanduser("~")) + "/.config"
    return base + "/torch_fl/config.toml"  # (string joins: every setting lookup asks, os.path.join costs)


def user_config(explicit: Path | None = None) -> ConfigFile:
    """The user file (`explicit`: FL_CONFIG's path). FL_CONFIG naming a file that is not there is an error
    (it used to be ignored, so a typo in the path silently dropped every setting of the file)."""
    path = _user_config_file(explicit)
    info = _regular_file(path)
    if info is not None:
        return _read(path, None, info)
    if explicit is not None:
        why = "is a folder" if os.path.isdir(path) else "exists but is not a regular file" \
            if os.path.exists(path) else "does not exist"
        raise ConfigError(f"FL_CONFIG: {path} {why}; it names the user config file. Fix: point FL_CONFIG at a "
                          "TOML file (see `torchfl docs env`), or unset it to use ~/.config/torch_fl/config.toml.")
    return _NO_FILE  # (one object: the settings layer skips re-checking files it has seen, by identity)


# `torchfl scan` / `torchfl fix` ----------------------------------------------------------------------
SCAN_KEYS = ("select", "extend-select", "ignore", "extend-exclude")
_DEPRECATED_TABLE = "[tool.torchfl]"
_WARNED: set[Path] = set()  # files whose deprecated table was already reported in this process


class ScanConfig(NamedTuple):
    """A scan table; ``path`` is None when no pyproject.toml (or torch_fl.toml) has one."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    path: Path | None = None
    extend_select: tuple[str, ...] = ()
    table: str = "[tool.torch_fl.scan]"

    @property
    def root(self) -> Path | None:
        return None if self.path is None else self.path.parent


def _string_list(value: Any, key: str, where: Path, table: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ScanConfigError(f"{where}: {table} {key} must be a list of strings, got {value!r}")
    return tuple(value)


def _scan_table(path: Path) -> tuple[dict[str, Any], str] | None:
    from . import _toml

    try:
        data = _toml.loads(_toml.read_text(path))
    except (OSError, ValueError, RecursionError) as exc:
        raise ScanConfigError(f"{path}: cannot read: {exc}") from None
    if path.name == "torch_fl.toml":
        table = data.get("scan")
        return None if table is None else (table, "[scan]")
    tool = data.get("tool", {})
    new = tool.get("torch_fl", {}).get("scan") if isinstance(tool.get("torch_fl"), dict) else None
    if new is not None:
        return new, "[tool.torch_fl.scan]"
    old = tool.get("torchfl")
    if old is not None:
        if path not in _WARNED:
            import sys

            _WARNED.add(path)
            print(f"torchfl: warning: {path}: {_DEPRECATED_TABLE} is deprecated: rename the table to "
                  f"[tool.torch_fl.scan] (same keys)", file=sys.stderr)
        return old, _DEPRECATED_TABLE
    return None


def load_scan_config(start: Path, validate: Any = None) -> ScanConfig:
    """The scan table of the nearest pyproject.toml (``[tool.torch_fl.scan]``, or the deprecated
    ``[tool.torchfl]``) or torch_fl.toml (``[scan]``) that has one, from `start` upwards. `validate(code)`
    raises ValueError for a selector that names no rule."""
    directory = start.resolve()
    if not directory.is_dir():
        directory = directory.parent
    for candidate in (directory, *directory.parents):
        for name in ("torch_fl.toml", "pyproject.toml"):
            path = candidate / name
            if not path.is_file():
                continue
            found = _scan_table(path)
            if found is None:
                continue
            table, label = found
            if not isinstance(table, dict):
                raise ScanConfigError(f"{path}: {label} must be a table")
            unknown = sorted(set(table) - set(SCAN_KEYS))
            if unknown:
                hint = did_you_mean(unknown[0], SCAN_KEYS)
                raise ScanConfigError(f"{path}: unknown key(s) in {label}: {', '.join(unknown)} "
                                      f"(allowed: {', '.join(SCAN_KEYS)}){hint}")
            config = ScanConfig(
                _string_list(table["select"], "select", path, label) if "select" in table else None,
                _string_list(table.get("ignore", []), "ignore", path, label),
                _string_list(table.get("extend-exclude", []), "extend-exclude", path, label), path,
                _string_list(table.get("extend-select", []), "extend-select", path, label), label)
            if validate is not None:
                try:
                    for selector in (*(config.select or ()), *config.extend_select, *config.ignore):
                        validate(selector)
                except ValueError as exc:
                    raise ScanConfigError(f"{path}: {label} {exc}") from None
            return config
    return ScanConfig()
