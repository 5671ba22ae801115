"""Project and user config files.

Project file: the nearest ``torch_fl.toml`` (or a ``[tool.torch_fl]`` table in the nearest
``pyproject.toml``) found walking up from the current directory. User file: ``FL_CONFIG``, else
``$XDG_CONFIG_HOME/torch_fl/config.toml`` (``~/.config/torch_fl/config.toml``).

Keys (all optional)::

    device = "acc0"                      # default device for torch.fl.device()
    backend = "cuda"                     # force a description instead of auto-detection
    device_map = { acc0 = "cuda:1", acc1 = "cpu" }
    log = "dispatch=DEBUG"               # same syntax as FL_LOG

    [routes]                             # per-op routes (same meaning as FL_ROUTE)
    "aten::gelu" = "translate"
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _env, _toml
from .errors import ConfigError, did_you_mean

CONFIG_KEYS = ("device", "backend", "device_map", "log", "routes")


@dataclass(frozen=True)
class ConfigFile:
    path: Path | None
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.values.get(key)


def _validate(values: dict[str, Any], path: Path) -> dict[str, Any]:
    for key, value in values.items():
        if key not in CONFIG_KEYS:
            raise ConfigError(f"{path}: unknown key '{key}'.{did_you_mean(key, CONFIG_KEYS)} "
                              f"Known keys: {', '.join(CONFIG_KEYS)}.")
        if key in ("device_map", "routes"):
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(f"{path}: '{key}' must be a table of strings, "
                                  f"e.g. {key} = {{ acc0 = \"cuda:1\" }}")
        elif not isinstance(value, str):
            raise ConfigError(f"{path}: '{key}' must be a string, got {value!r}")
    return values


def _read(path: Path, table: str | None = None) -> ConfigFile:
    try:
        data = _toml.loads(_toml.read_text(path))
    except (OSError, ValueError, RecursionError) as exc:  # TOMLDecodeError, TextDecodeError are ValueErrors
        raise ConfigError(f"{path}: cannot read the torch-fl config: {exc}") from None
    if table:
        data = data.get("tool", {}).get(table)
        if data is None:
            return ConfigFile(None)
    return ConfigFile(path, _validate(data, path))


def project_config(start: Path | None = None) -> ConfigFile:
    """The nearest project config above `start` (default: the current directory)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "torch_fl.toml"
        if candidate.is_file():
            return _read(candidate)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            found = _read(pyproject, table="torch_fl")
            if found.path is not None:
                return found
    return ConfigFile(None)


def user_config_path() -> Path:
    explicit = _env.FL_CONFIG.value()
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "torch_fl" / "config.toml"


def user_config() -> ConfigFile:
    path = user_config_path()
    return _read(path) if path.is_file() else ConfigFile(None)


def lookup(key: str) -> tuple[Any, str] | None:
    """The value of `key` from the project file, else the user file, with where it came from."""
    for config in (project_config(), user_config()):
        value = config.get(key)
        if value is not None:
            return value, str(config.path)
    return None
